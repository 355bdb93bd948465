"""Models tools/fx_export.py can export by name (--spec tools.fx_models:NAME).

Third-party models (torchvision's resnet18, mobilenet_v2, a small VisionTransformer) and a
Python twin of Magi's Llama-style model (magi/models/llama.h). Every function takes the
export mode and returns a ModelSpec with fixed seeds, so exports are reproducible. Joint
graphs train BatchNorm (running statistics update) but keep dropout off, since a random
mask cannot be compared across frameworks.
"""

import collections

import torch
import torch.nn as nn
import torch.nn.functional as F

ModelSpec = collections.namedtuple("ModelSpec", ["model", "inputs", "loss_fn", "loss_inputs", "process_groups"],
                                   defaults=(None, (), None))


def _classifier_spec(model, mode, image, classes):
    torch.manual_seed(1)
    x = torch.randn(*image)
    if mode == "joint":
        model.train()
        for m in model.modules():
            if isinstance(m, nn.Dropout):
                m.eval()
        target = torch.randint(0, classes, (image[0],))
        return ModelSpec(model, (x,), lambda out, t: F.cross_entropy(out, t), (target,))
    model.eval()
    return ModelSpec(model, (x,))


def resnet18(mode="forward"):
    import torchvision
    torch.manual_seed(0)
    return _classifier_spec(torchvision.models.resnet18(num_classes=10), mode, (2, 3, 32, 32), 10)


def mobilenet_v2(mode="forward"):
    import torchvision
    torch.manual_seed(0)
    return _classifier_spec(torchvision.models.mobilenet_v2(num_classes=10), mode, (2, 3, 32, 32), 10)


def vit(mode="forward"):
    from torchvision.models.vision_transformer import VisionTransformer
    torch.manual_seed(0)
    model = VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
                              num_classes=10)
    return _classifier_spec(model, mode, (2, 3, 32, 32), 10)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    def __init__(self, dim, heads, ffn):
        super().__init__()
        self.heads = heads
        self.attention_norm = RMSNorm(dim)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.ffn_norm = RMSNorm(dim)
        self.w1 = nn.Linear(dim, ffn, bias=False)
        self.w2 = nn.Linear(ffn, dim, bias=False)
        self.w3 = nn.Linear(dim, ffn, bias=False)

    def forward(self, x, cos, sin):
        b, s, d = x.shape
        h = self.attention_norm(x)

        def heads(t):
            return t.view(b, s, self.heads, d // self.heads).transpose(1, 2)

        def rope(t):
            half = t.shape[-1] // 2
            t1, t2 = t[..., :half], t[..., half:]
            return torch.cat([t1 * cos - t2 * sin, t1 * sin + t2 * cos], dim=-1)

        q, k, v = rope(heads(self.wq(h))), rope(heads(self.wk(h))), heads(self.wv(h))
        scores = q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5
        mask = torch.full((s, s), float("-inf")).triu(1)
        attention = torch.softmax(scores + mask, dim=-1) @ v
        x = x + self.wo(attention.transpose(1, 2).reshape(b, s, d))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Llama(nn.Module):
    """The architecture of magi/models/llama.h (pre-norm, RoPE, SwiGLU, untied head)."""

    def __init__(self, vocab=64, dim=32, layers=2, heads=4, ffn=88, seq=16):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(Block(dim, heads, ffn) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        half = dim // heads // 2
        freqs = 1.0 / (10000.0 ** (torch.arange(half).float() / half))
        angles = torch.outer(torch.arange(seq).float(), freqs)
        self.register_buffer("rope_cos", angles.cos())
        self.register_buffer("rope_sin", angles.sin())

    def forward(self, tokens):
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, self.rope_cos, self.rope_sin)
        return self.output(self.norm(x))


def llama(mode="forward"):
    torch.manual_seed(0)
    model = Llama()
    tokens = torch.randint(0, 64, (2, 16))
    if mode == "joint":
        targets = torch.randint(0, 64, (2, 16))
        return ModelSpec(model, (tokens,), lambda logits, t: F.cross_entropy(logits.reshape(-1, 64), t.reshape(-1)),
                         (targets,))
    model.eval()
    return ModelSpec(model, (tokens,))


class _ShardedLinear(nn.Module):
    """SimpleFSDP-style: the weight lives as a dim-0 shard, gathered in forward; the
    output is reduce-scattered (functional collectives, PyTorch 2.x)."""

    def __init__(self, group, world):
        super().__init__()
        self.group = group
        self.w_shard = nn.Parameter(torch.randn(8 // world, 16))

    def forward(self, x):
        import torch.distributed._functional_collectives as funcol
        w = funcol.all_gather_tensor(self.w_shard, 0, self.group)
        y = torch.relu(x @ w.t())
        return funcol.reduce_scatter_tensor(y.t().contiguous(), "sum", 0, self.group)


def fsdp_collectives(mode="forward"):
    """A graph with functional collectives; needs PyTorch 2.x (torch.distributed._functional_collectives).
    Runs as a 1-rank Gloo group so make_fx can execute the collectives while tracing."""
    import torch.distributed as dist
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29511", rank=0, world_size=1)
    world = dist.get_world_size()
    torch.manual_seed(0)
    model = _ShardedLinear(dist.group.WORLD, world)
    x = torch.randn(4, 16)
    return ModelSpec(model, (x,), process_groups={dist.group.WORLD.group_name: world})
