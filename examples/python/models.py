"""The models the examples train, as users write them: torchvision's resnet18 and mobilenet_v3_small
unmodified, a small GPT-style language model, a small U-Net and a token tagger written as ordinary
nn.Modules (the tagger as Hugging Face models are written, which TorchScript cannot compile). Each
with a batch of synthetic data and its loss; and what fine-tuning sets on them: frozen parameters and
the optimizer."""

import dataclasses
import fnmatch
import math
from typing import Optional, Tuple

import torch
from torch import nn
from torch.nn import functional as F


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention, then an MLP, each with a residual."""

    def __init__(self, hidden, heads, dropout):
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden)
        self.attention = nn.MultiheadAttention(hidden, heads, dropout=dropout, batch_first=True)
        self.norm2 = nn.LayerNorm(hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden), nn.Dropout(dropout))

    def forward(self, x, mask):
        h = self.norm1(x)
        x = x + self.attention(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class LanguageModel(nn.Module):
    def __init__(self, vocab=2000, hidden=256, heads=4, layers=4, context=128, dropout=0.1):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(context, hidden)
        self.blocks = nn.ModuleList([Block(hidden, heads, dropout) for _ in range(layers)])
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab)
        self.context = context

    def forward(self, ids):
        length = ids.shape[1]
        positions = torch.arange(length, device=ids.device)
        mask = torch.triu(torch.full((length, length), float("-inf"), device=ids.device), diagonal=1)
        x = self.embed(ids) + self.position(positions)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))


class LoRALinear(nn.Module):
    """A frozen nn.Linear with a trainable low-rank update (LoRA, Hu et al. 2021):
    y = W x + b + (alpha / rank) B A x, with A [rank, in] and B [out, rank]; B starts at zero, so
    the adapted model starts as the base one."""

    def __init__(self, base: nn.Linear, rank: int = 8, alpha: float = 16.0):
        super().__init__()
        self.base = base
        for p in base.parameters():
            p.requires_grad_(False)
        self.lora_a = nn.Parameter(torch.empty(rank, base.in_features))
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))
        self.scale = alpha / rank

    def forward(self, x):
        return self.base(x) + F.linear(F.linear(x, self.lora_a), self.lora_b) * self.scale


class LoRAAttention(nn.Module):
    """nn.MultiheadAttention's computation with its four projections as LoRALinear layers (its fused
    in_proj split into query, key and value), called as MultiheadAttention is."""

    def __init__(self, attention: nn.MultiheadAttention, rank: int = 8, alpha: float = 16.0):
        super().__init__()
        hidden, self.heads, self.dropout = attention.embed_dim, attention.num_heads, attention.dropout
        projections = []
        for k in range(3):
            linear = nn.Linear(hidden, hidden)
            with torch.no_grad():
                linear.weight.copy_(attention.in_proj_weight[k * hidden:(k + 1) * hidden])
                linear.bias.copy_(attention.in_proj_bias[k * hidden:(k + 1) * hidden])
            projections.append(LoRALinear(linear, rank, alpha))
        self.query, self.key, self.value = projections
        out = nn.Linear(hidden, hidden)
        out.load_state_dict(attention.out_proj.state_dict())
        self.out = LoRALinear(out, rank, alpha)

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                attn_mask: Optional[torch.Tensor] = None,
                need_weights: bool = False) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        batch, length, hidden = query.shape
        head = hidden // self.heads
        q = self.query(query).view(batch, length, self.heads, head).transpose(1, 2)
        k = self.key(key).view(batch, length, self.heads, head).transpose(1, 2)
        v = self.value(value).view(batch, length, self.heads, head).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(head)
        if attn_mask is not None:
            scores = scores + attn_mask
        weights = F.dropout(F.softmax(scores, dim=-1), self.dropout, self.training)
        mixed = torch.matmul(weights, v).transpose(1, 2).reshape(batch, length, hidden)
        return self.out(mixed), None


def add_lora(model, rank=8, alpha=16.0):
    """The language model with its base frozen and rank-`rank` adapters on every block's attention
    projections (query, key, value, output) and MLP projections; the adapters alone train."""
    for p in model.parameters():
        p.requires_grad_(False)
    for block in model.blocks:
        block.attention = LoRAAttention(block.attention, rank, alpha)
        block.mlp[0] = LoRALinear(block.mlp[0], rank, alpha)
        block.mlp[2] = LoRALinear(block.mlp[2], rank, alpha)
    return model


class UNet(nn.Module):
    """A two-level U-Net for per-pixel classes: [N, 3, H, W] in, class scores [N, classes, H, W] out,
    trained against [N, H, W] as torch.nn.functional.cross_entropy takes them."""

    def __init__(self, classes=4, width=16):
        super().__init__()

        def double(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                                 nn.Conv2d(cout, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

        self.down1 = double(3, width)
        self.down2 = double(width, 2 * width)
        self.bottom = double(2 * width, 4 * width)
        self.up2 = nn.ConvTranspose2d(4 * width, 2 * width, 2, stride=2)
        self.merge2 = double(4 * width, 2 * width)
        self.up1 = nn.ConvTranspose2d(2 * width, width, 2, stride=2)
        self.merge1 = double(2 * width, width)
        self.head = nn.Conv2d(width, classes, 1)

    def forward(self, x):
        d1 = self.down1(x)
        d2 = self.down2(F.max_pool2d(d1, 2))
        b = self.bottom(F.max_pool2d(d2, 2))
        u2 = self.merge2(torch.cat([self.up2(b), d2], dim=1))
        u1 = self.merge1(torch.cat([self.up1(u2), d1], dim=1))
        return self.head(u1)


@dataclasses.dataclass
class TaggerOutput:
    loss: Optional[torch.Tensor]
    logits: torch.Tensor


class Refiner(nn.Module):
    """Refines token states until they settle: residual steps of one MLP, at most `steps`, stopping
    once a step changes them by less than `tolerance` of their norm on average (as many steps as the
    data needs)."""

    def __init__(self, hidden, steps=4, tolerance=0.25):
        super().__init__()
        self.update = nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, hidden), nn.Tanh())
        self.steps, self.tolerance = steps, tolerance

    def forward(self, x):
        for _ in range(self.steps):
            change = self.update(x)
            x = x + change
            if change.norm(dim=-1).mean() < self.tolerance * x.norm(dim=-1).mean():
                break
        return x


class TaggerBlock(nn.Module):
    """An encoder block that attends to the tokens the attention mask keeps."""

    def __init__(self, hidden, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden)
        self.attention = nn.MultiheadAttention(hidden, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))

    def forward(self, x, padding):
        h = self.norm1(x)
        x = x + self.attention(h, h, h, key_padding_mask=padding, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class Tagger(nn.Module):
    """A token tagger written as Hugging Face models are: keyword inputs (input_ids, attention_mask,
    labels), a dataclass output with .loss and .logits, and a refinement of as many steps as the data
    needs. It neither scripts nor traces as it is: headroom captures it in eager PyTorch."""

    def __init__(self, vocab=2000, hidden=256, heads=4, layers=3, classes=16, context=128):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(context, hidden)
        self.blocks = nn.ModuleList([TaggerBlock(hidden, heads) for _ in range(layers)])
        self.refiner = Refiner(hidden)
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, classes)
        self.context, self.classes = context, classes

    def forward(self, input_ids, attention_mask, labels=None):
        padding = attention_mask == 0
        x = self.embed(input_ids) + self.position(torch.arange(input_ids.shape[1], device=input_ids.device))
        for block in self.blocks:
            x = block(x, padding)
        logits = self.head(self.norm(self.refiner(x)))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.reshape(-1, self.classes), labels.reshape(-1))
        return TaggerOutput(loss=loss, logits=logits)


def language_model_loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def build(name, image_size=128):
    """(model, loss_fn, make_batch(batch, seed) -> (inputs, targets), what headroom.profile takes)."""
    if name in ("resnet18", "mobilenet_v3_small"):
        import torchvision

        model = getattr(torchvision.models, name)(num_classes=100)

        def make_batch(batch, seed=0):
            g = torch.Generator().manual_seed(seed)
            return (torch.randn(batch, 3, image_size, image_size, generator=g),
                    torch.randint(0, 100, (batch,), generator=g))

        return model, nn.CrossEntropyLoss(), make_batch, {}
    if name == "unet":
        model = UNet()

        def make_batch(batch, seed=0):
            g = torch.Generator().manual_seed(seed)
            return (torch.randn(batch, 3, image_size, image_size, generator=g),
                    torch.randint(0, 4, (batch, image_size, image_size), generator=g))

        # Per-pixel classes along dimension 1: cross-entropy as PyTorch defines it, profile's default.
        return model, nn.CrossEntropyLoss(), make_batch, {}
    if name in ("lm", "lm-lora"):
        model = LanguageModel()
        if name == "lm-lora":
            add_lora(model)

        def make_batch(batch, seed=0):
            g = torch.Generator().manual_seed(seed)
            ids = torch.randint(0, 2000, (batch, model.context + 1), generator=g)
            return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()

        # Its classes are the logits' last dimension ([N, T, V]), not PyTorch's dimension 1.
        return model, language_model_loss, make_batch, {"loss": "cross-entropy-last"}
    if name == "tagger":
        model = Tagger()

        def make_batch(batch, seed=0):
            g = torch.Generator().manual_seed(seed)
            ids = torch.randint(0, 2000, (batch, model.context), generator=g)
            # Each sequence padded after a length of its own (at least half the context).
            lengths = torch.randint(model.context // 2, model.context + 1, (batch, 1), generator=g)
            mask = (torch.arange(model.context) < lengths).long()
            labels = torch.randint(0, model.classes, (batch, model.context), generator=g)
            return {"input_ids": ids, "attention_mask": mask, "labels": labels}, None

        # A dict batch holding its labels; the model returns its loss.
        return model, None, make_batch, {"loss": "model"}
    raise SystemExit(f"unknown model {name!r}: resnet18, mobilenet_v3_small, unet, lm, lm-lora or tagger")


def step_loss(model, loss_fn, inputs, targets):
    """A whole batch's loss as the loop computes it: loss_fn(model(inputs), targets), or the model's
    own loss where loss_fn is None (a dict batch holding its labels)."""
    if isinstance(inputs, dict):
        outputs = model(**inputs)
    else:
        outputs = model(*inputs) if isinstance(inputs, tuple) else model(inputs)
    return outputs.loss if loss_fn is None else loss_fn(outputs, targets)


def freeze(model, patterns):
    """Turns requires_grad off where `patterns` say, as `headroom profile --freeze` does: comma-separated
    globs on a parameter's path or a submodule above it, in order, "!" training again ("*,!fc")."""
    if not patterns:
        return
    for name, p in model.named_parameters():
        frozen = False
        prefixes = [name] + [name[:k] for k, c in enumerate(name) if c == "."]
        for pattern in patterns.split(","):
            if any(fnmatch.fnmatchcase(prefix, pattern.lstrip("!")) for prefix in prefixes):
                frozen = not pattern.startswith("!")
        p.requires_grad_(not frozen)


def make_optimizer(text, parameters, lr=None):
    """The torch.optim optimizer headroom's text names: "sgd" (momentum 0.9), "sgd(momentum=0)",
    "adam", "adam(amsgrad)", "adamw", "adamw(amsgrad)"; `lr` None: SGD's 0.01, Adam's 1e-4, as
    fine-tuning commonly starts."""
    if text.startswith("sgd"):
        momentum = 0.9 if text == "sgd" else float(text[len("sgd(momentum="):-1])
        return torch.optim.SGD(parameters, lr=0.01 if lr is None else lr, momentum=momentum)
    kind = torch.optim.AdamW if text.startswith("adamw") else torch.optim.Adam
    return kind(parameters, lr=1e-4 if lr is None else lr, amsgrad=text.endswith("(amsgrad)"))


def max_relative_difference(planned, reference):
    """max over parameters of |planned - reference|_inf / |reference|_inf, of their gradients."""
    worst = 0.0
    for (name, p), q in zip(planned.named_parameters(), reference.parameters()):
        if q.grad is None:  # frozen: neither side has one
            if p.grad is not None:
                return float("inf")
            continue
        scale = q.grad.abs().max().item()
        difference = (p.grad - q.grad).abs().max().item()
        worst = max(worst, difference / scale if scale > 0 else difference)
    return worst


def add_arguments(parser, model="resnet18", steps_help="training steps", dict_batches=False):
    """The flags the examples and the overhead bench share; `dict_batches`: the script also runs the
    tagger, whose batch is a dict holding its labels and whose loss is its own."""
    names = ["resnet18", "mobilenet_v3_small", "unet", "lm", "lm-lora"] + (["tagger"] if dict_batches else [])
    parser.add_argument("--model", choices=names, default=model)
    parser.add_argument("--freeze", default="", help="parameters not to train, as profile --freeze: '*,!fc'")
    parser.add_argument("--optimizer", default="adam",
                        help="sgd (momentum 0.9), sgd(momentum=0), adam, adam(amsgrad), adamw, adamw(amsgrad)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--fraction", type=float, default=0.6, help="the budget, as a fraction of the whole batch's need")
    parser.add_argument("--steps", type=int, default=20, help=steps_help)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--timing-seconds", type=float, default=2.0,
                        help="the profile's timing rounds (profile --timing-seconds): longer ones resolve closer plans")
    parser.add_argument("--image-size", type=int, default=128)

