#!/usr/bin/python3
"""Exports torchvision's classifiers exactly as torchvision builds them, for `headroom profile --torchscript`.

Nothing is rewritten: each model is built with `num_classes=10` and random (seeded) weights, passed to
`torch.jit.script` and saved. headroom cuts the module's own forward into layers. Next to each NAME.pt goes
NAME.json with the input and the `headroom profile` line to run next.

  python3 examples/export_classifiers.py                          # all eleven, into examples/classifiers
  python3 examples/export_classifiers.py --models resnet18,vgg11 --image-size 64 --out /tmp/c
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

PROG = "export_classifiers.py"
torch = common.require_torch(PROG)

torchvision = common.require_torchvision(PROG)

MODELS = ("resnet18", "shufflenet_v2_x0_5", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "convnext_tiny",
          "densenet121", "vgg11", "alexnet", "regnet_y_400mf", "squeezenet1_0")
CLASSES = 10


def main():
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated torchvision model names")
    parser.add_argument("--image-size", type=int, default=64, help="the input's height and width (default 64)")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "classifiers"),
                        help="directory for NAME.pt and NAME.json")
    args = parser.parse_args()
    names = [n for n in args.models.split(",") if n]
    for name in names:
        if not hasattr(torchvision.models, name) or not callable(getattr(torchvision.models, name)):
            common.fail(PROG, f"--models: '{name}' is not a torchvision model builder")
    if not 16 <= args.image_size <= 1024:
        common.fail(PROG, f"--image-size: {args.image_size} is not from 16 to 1024")
    os.makedirs(args.out, exist_ok=True)
    spec = common.ShapeSpec((3, args.image_size, args.image_size), "float32")
    for name in names:
        torch.manual_seed(0)
        started = time.monotonic()
        model = getattr(torchvision.models, name)(weights=None, num_classes=CLASSES)
        scripted = torch.jit.script(model)
        path = os.path.join(args.out, name + ".pt")
        scripted.save(path)
        command = f"headroom profile --torchscript {path} --input {spec} --batch-sizes 1,2,4 -o {name}-trace.json"
        with open(os.path.join(args.out, name + ".json"), "w") as f:
            json.dump({"model": name, "input": str(spec), "classes": CLASSES,
                       "parameters": sum(p.numel() for p in model.parameters()), "profile": command}, f, indent=2)
            f.write("\n")
        print(f"{name}: {path} ({time.monotonic() - started:.1f} s)\n  {command}")


if __name__ == "__main__":
    main()
