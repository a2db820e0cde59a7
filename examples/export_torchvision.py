#!/usr/bin/python3
"""Exports real models as TorchScript chains for `headroom profile --torchscript`.

Each model is an `nn.Sequential` of named blocks, scripted with `torch.jit.script` and saved with
`torch.jit.save`: with `--depth 1` headroom's layers are its top-level children, called in order
(export_classifiers.py exports torchvision's models unmodified instead). Weights are random
(seeded): nothing outside Debian's package registry can be fetched here, and memory and time do not
depend on the values. Next to each NAME.pt goes NAME.json with the input, loss and the exact
`headroom profile` line to run next.

  python3 examples/export_torchvision.py                        # all four at 224x224, into examples/models
  python3 examples/export_torchvision.py --models resnet18,decoder --image-size 32 --out /tmp/m
"""

import argparse
import json
import math
import os
import sys
import time
import warnings
from collections import OrderedDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

PROG = "export_torchvision.py"
torch = common.require_torch(PROG)
from torch import nn  # noqa: E402

torchvision = common.require_torchvision(PROG)

# nn.TransformerEncoderLayer of torch 1.13 lists batch_first among its TorchScript constants but keeps it
# only in its attention module; scripting warns about it on every export, with nothing to fix on our side.
warnings.filterwarnings("ignore", message="'batch_first' was found in ScriptModule constants")

MODELS = ("resnet18", "resnet50", "vit_b_16", "decoder")
# The chains must compute what torchvision's own forward computes; they reuse its modules, so any
# difference is a cut in the wrong place, not rounding.
MAX_REL_DIFF = 1e-5


# ---- ResNet: stem, the four stages, head ---------------------------------------------------------

def resnet_chain(name, image_size):
    reference = getattr(torchvision.models, name)(weights=None)
    chain = nn.Sequential(OrderedDict([
        ("stem", nn.Sequential(OrderedDict([
            ("conv1", reference.conv1), ("bn1", reference.bn1), ("relu", reference.relu),
            ("maxpool", reference.maxpool)]))),
        ("layer1", reference.layer1),
        ("layer2", reference.layer2),
        ("layer3", reference.layer3),
        ("layer4", reference.layer4),
        # torchvision flattens with torch.flatten(x, 1); nn.Flatten(1) is the same op as a module.
        ("head", nn.Sequential(OrderedDict([
            ("avgpool", reference.avgpool), ("flatten", nn.Flatten(1)), ("fc", reference.fc)]))),
    ]))
    return chain, reference, common.ShapeSpec((3, image_size, image_size), "float32"), "cross-entropy"


# ---- ViT-B/16: patch embedding, 12 encoder blocks, head ------------------------------------------

class PatchEmbedding(nn.Module):
    """torchvision's VisionTransformer._process_input, the class token and Encoder's position
    embedding and dropout: everything before the first encoder block."""

    def __init__(self, vit):
        super().__init__()
        self.conv_proj = vit.conv_proj
        self.class_token = vit.class_token
        self.pos_embedding = vit.encoder.pos_embedding
        self.dropout = vit.encoder.dropout
        self.hidden_dim = vit.hidden_dim
        self.patch_size = vit.patch_size
        self.image_size = vit.image_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        torch._assert(h == self.image_size and w == self.image_size, "input height and width must be image_size")
        x = self.conv_proj(x)
        x = x.reshape(n, self.hidden_dim, (h // self.patch_size) * (w // self.patch_size))
        x = x.permute(0, 2, 1)
        x = torch.cat([self.class_token.expand(n, -1, -1), x], dim=1)
        return self.dropout(x + self.pos_embedding)


class VitHead(nn.Module):
    """Encoder's final LayerNorm, the class token's output, the classification head."""

    def __init__(self, vit):
        super().__init__()
        self.ln = vit.encoder.ln
        self.heads = vit.heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.heads(self.ln(x)[:, 0])


def vit_chain(image_size):
    if image_size % 16 != 0:
        raise ValueError(f"--image-size: vit_b_16 needs a multiple of its patch size 16, not {image_size}")
    reference = torchvision.models.vit_b_16(weights=None, image_size=image_size)
    blocks = [("patch_embedding", PatchEmbedding(reference))]
    # torchvision's EncoderBlock is scriptable as it is: each becomes one layer of the chain.
    blocks += [(f"block{i}", block) for i, block in enumerate(reference.encoder.layers)]
    blocks.append(("head", VitHead(reference)))
    return nn.Sequential(OrderedDict(blocks)), reference, \
        common.ShapeSpec((3, image_size, image_size), "float32"), "cross-entropy"


# ---- A small GPT-style decoder -------------------------------------------------------------------

class TokenAndPosition(nn.Module):
    def __init__(self, vocab, seq, d_model, dropout):
        super().__init__()
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(seq, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.size(1), device=x.device)
        return self.dropout(self.tokens(x) + self.positions(positions))


class CausalBlock(nn.Module):
    """A pre-norm transformer block that attends only to earlier positions. The mask is built inside
    the block so that each layer of the chain takes one tensor and returns one, as headroom calls it."""

    def __init__(self, d_model, heads, dropout):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=4 * d_model, dropout=dropout,
                                                activation="gelu", batch_first=True, norm_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.size(1)
        mask = torch.triu(torch.full((t, t), float("-inf"), dtype=x.dtype, device=x.device), diagonal=1)
        return self.layer(x, src_mask=mask)


class LanguageModelHead(nn.Module):
    def __init__(self, d_model, vocab):
        super().__init__()
        self.ln = nn.LayerNorm(d_model)
        self.out = nn.Linear(d_model, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.ln(x))


def decoder_chain(args):
    blocks = [("embedding", TokenAndPosition(args.vocab, args.seq, args.d_model, args.dropout))]
    blocks += [(f"block{i}", CausalBlock(args.d_model, args.heads, args.dropout)) for i in range(args.layers)]
    blocks.append(("head", LanguageModelHead(args.d_model, args.vocab)))
    return nn.Sequential(OrderedDict(blocks)), None, \
        common.ShapeSpec((args.seq,), "int64", 0, args.vocab), "cross-entropy-last"


# ---- Export ----------------------------------------------------------------------------------------

def rel_diff(a, b):
    return (a - b).abs().max().item() / max(b.abs().max().item(), 1e-30)


def check_causal(module, spec):
    """A decoder whose mask leaks would still train: check that changing a late token leaves earlier
    positions' outputs alone."""
    x = spec.make(torch, 2)
    y = x.clone()
    y[:, -1] = (y[:, -1] + 1) % spec.high
    with torch.no_grad():
        a, b = module(x), module(y)
    leak = (a[:, :-1] - b[:, :-1]).abs().max().item()
    if leak != 0.0:
        raise AssertionError(f"decoder: outputs before the last position changed by {leak} when the last token did")


def compare_with_reference(name, loaded, reference, x):
    """Max relative difference of the reloaded chain's output against torchvision's forward, in eval
    mode so that BatchNorm and dropout are deterministic."""
    reference.eval()
    if name == "vit_b_16":
        # torchvision zero-initializes ViT's classifier (for fine-tuning), so its logits would be zero on
        # both sides whatever the blocks compute: give both the same random classifier for the check.
        weight = torch.randn_like(reference.heads.head.weight) * 0.02
        loaded.head.heads.head.weight.copy_(weight)
        reference.heads.head.weight.copy_(weight)
    out, expected = loaded(x), reference(x)
    if out.shape != expected.shape:
        raise AssertionError(f"{name}: the chain's output has shape {list(out.shape)}, torchvision's "
                             f"{list(expected.shape)}")
    if expected.abs().max().item() == 0.0:
        raise AssertionError(f"{name}: torchvision's output is zero, the comparison would prove nothing")
    diff = rel_diff(out, expected)
    if not diff <= MAX_REL_DIFF:
        raise AssertionError(f"{name}: the chain differs from torchvision's forward by {diff:.3g} "
                             f"(relative; at most {MAX_REL_DIFF} allowed)")
    return diff


def display_path(path):
    """A path as a user would type it next: relative to the current directory when below it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def export(name, args):
    torch.manual_seed(args.seed)
    started = time.perf_counter()
    if name in ("resnet18", "resnet50"):
        chain, reference, input_spec, loss = resnet_chain(name, args.image_size)
    elif name == "vit_b_16":
        chain, reference, input_spec, loss = vit_chain(args.image_size)
    else:
        chain, reference, input_spec, loss = decoder_chain(args)

    scripted = torch.jit.script(chain)
    path = os.path.join(args.out, name + ".pt")
    tmp = path + ".tmp"
    torch.jit.save(scripted, tmp)
    os.replace(tmp, path)

    # Check what a user will load, not what is in memory: reload the file, compare with torchvision's
    # forward (eval mode, so BatchNorm and dropout are deterministic) on a random batch of two.
    loaded = torch.jit.load(path)
    loaded.eval()
    names = [child for child, _ in loaded.named_children()]
    expected = [child for child, _ in chain.named_children()]
    if names != expected:
        raise AssertionError(f"{name}: reloaded children {names} are not {expected}")
    x = input_spec.make(torch, 2)
    with torch.no_grad():
        out = loaded(x)
        check = None
        if reference is not None:
            check = compare_with_reference(name, loaded, reference, x)
    if name == "decoder":
        check_causal(loaded, input_spec)
    loaded.train()

    output_spec = "x".join(str(d) for d in out.shape[1:]) + ":" + str(out.dtype).replace("torch.", "")
    parameters = sum(p.numel() for p in loaded.parameters())
    command = (f"headroom profile --torchscript {display_path(path)} --input {input_spec} --loss {loss} "
               f"--depth 1 -o {name}-trace.json")
    sidecar = OrderedDict([
        ("model", name),
        ("torchscript", os.path.basename(path)),
        ("input", str(input_spec)),
        ("loss", loss),
        # headroom infers cross-entropy's target from the output: int64 classes over its dimension 1
        # (cross-entropy-last: its last).
        ("target", None),
        ("output", output_spec),
        ("classes", out.shape[-1] if loss == "cross-entropy-last" else out.shape[1]),
        ("layers", names),
        ("parameters", parameters),
        ("param_bytes", sum(p.numel() * p.element_size() for p in loaded.parameters())),
        ("has_batchnorm", any(m.original_name.startswith("BatchNorm") for m in loaded.modules())),
        ("seed", args.seed),
        ("torch", torch.__version__),
        ("torchvision", torchvision.__version__),
        ("check_max_rel_diff", check),
        ("profile_command", command),
    ])
    if name == "decoder":
        sidecar["config"] = {k: getattr(args, k) for k in ("vocab", "seq", "d_model", "heads", "layers", "dropout")}
    else:
        sidecar["config"] = {"image_size": args.image_size}
    with open(os.path.join(args.out, name + ".json.tmp"), "w") as f:
        json.dump(sidecar, f, indent=2)
        f.write("\n")
    os.replace(os.path.join(args.out, name + ".json.tmp"), os.path.join(args.out, name + ".json"))

    seconds = time.perf_counter() - started
    size = os.path.getsize(path)
    checked = "causal mask checked" if check is None else f"matches torchvision (max rel diff {check:.2g})"
    print(f"# {name}: {len(names)} layers, {parameters / 1e6:.2f} M parameters, {size / 2**20:.1f} MiB, "
          f"{checked}, {seconds:.1f} s", file=sys.stderr)
    print(command)


def positive(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"'{text}' is not positive")
    return value


def main():
    default_out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=default_out, help="output folder (default examples/models)")
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated subset of {','.join(MODELS)}")
    parser.add_argument("--image-size", type=positive, default=224,
                        help="image side for resnet18/resnet50/vit_b_16 (vit: a multiple of 16); default 224")
    parser.add_argument("--seed", type=int, default=0, help="seed for the random weights (default 0)")
    group = parser.add_argument_group("decoder sizes")
    group.add_argument("--vocab", type=positive, default=8192)
    group.add_argument("--seq", type=positive, default=128)
    group.add_argument("--d-model", type=positive, default=256)
    group.add_argument("--heads", type=positive, default=4)
    group.add_argument("--layers", type=positive, default=4)
    group.add_argument("--dropout", type=float, default=0.1,
                       help="dropout in the decoder (default 0.1; the PyTorch cross-checks switch it off)")
    args = parser.parse_args()

    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in MODELS]
    if not models or unknown:
        common.fail(PROG, f"--models: unknown model '{unknown[0] if unknown else ''}' (known: {', '.join(MODELS)})")
    if "vit_b_16" in models and args.image_size % 16 != 0:
        common.fail(PROG, f"--image-size: vit_b_16 needs a multiple of its patch size 16, not {args.image_size}")
    if "resnet18" in models or "resnet50" in models:
        if args.image_size < 32:
            common.fail(PROG, f"--image-size: resnets reduce the image 32-fold; {args.image_size} is below 32")
    if args.d_model % args.heads != 0:
        common.fail(PROG, f"--heads: d_model {args.d_model} is not a multiple of {args.heads} heads")
    if not (0.0 <= args.dropout < 1.0) or math.isnan(args.dropout):
        common.fail(PROG, f"--dropout: {args.dropout} is not in [0, 1)")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        common.fail(PROG, f"--out: '{args.out}' exists and is not a directory")
    os.makedirs(args.out, exist_ok=True)

    for name in models:
        try:
            export(name, args)
        except AssertionError as error:
            common.fail(PROG, str(error), 1)


if __name__ == "__main__":
    main()
