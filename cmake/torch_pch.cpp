// The target that builds the precompiled libtorch header (cmake/torch_pch.cmake); nothing of its own.
