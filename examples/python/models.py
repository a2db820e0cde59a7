"""The two models the examples train, as users write them: torchvision's resnet18 unmodified, and a
small GPT-style language model written as an ordinary nn.Module. Each with a batch of synthetic data
and its loss."""


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


def language_model_loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def build(name, image_size=128):
    """(model, loss_fn, make_batch(batch, seed) -> (inputs, targets), what headroom.profile takes)."""
    if name == "resnet18":
        import torchvision

        model = torchvision.models.resnet18(num_classes=100)

        def make_batch(batch, seed=0):
            g = torch.Generator().manual_seed(seed)
            return (torch.randn(batch, 3, image_size, image_size, generator=g),
                    torch.randint(0, 100, (batch,), generator=g))

        return model, nn.CrossEntropyLoss(), make_batch, {}
    if name == "lm":
        model = LanguageModel()

        def make_batch(batch, seed=0):
            g = torch.Generator().manual_seed(seed)
            ids = torch.randint(0, 2000, (batch, model.context + 1), generator=g)
            return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()

        return model, language_model_loss, make_batch, {}
    raise SystemExit(f"unknown model {name!r}: resnet18 or lm")


def max_relative_difference(planned, reference):
    """max over parameters of |planned - reference|_inf / |reference|_inf, of their gradients."""
    worst = 0.0
    for (name, p), q in zip(planned.named_parameters(), reference.parameters()):
        scale = q.grad.abs().max().item()
        difference = (p.grad - q.grad).abs().max().item()
        worst = max(worst, difference / scale if scale > 0 else difference)
    return worst


def add_arguments(parser, model="resnet18", steps_help="training steps"):
    """The flags the examples and the overhead bench share."""
    parser.add_argument("--model", choices=["resnet18", "lm"], default=model)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--fraction", type=float, default=0.6, help="the budget, as a fraction of the whole batch's need")
    parser.add_argument("--steps", type=int, default=20, help=steps_help)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--image-size", type=int, default=128)

