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
            if isinstance(m, nn.Dropout) or type(m).__name__ == "StochasticDepth":
                m.eval()  # random: not comparable across frameworks
        target = torch.randint(0, classes, (image[0],))
        return ModelSpec(model, (x,), lambda out, t: F.cross_entropy(out, t), (target,))
    model.eval()
    return ModelSpec(model, (x,))


def resnet18(mode="forward"):
    import torchvision
    torch.manual_seed(0)
    return _classifier_spec(torchvision.models.resnet18(num_classes=10), mode, (2, 3, 32, 32), 10)


def resnet18_train(mode="forward"):
    """resnet18 for multi-step training checks (magi/frontend/fx:fx_training_test): 4 images
    of 64x64. On 2 images of 32x32, layer4's maps are 1x1 and its BatchNorm normalizes over
    2 values, which leaves some gradients at rounding noise; AdamW's first steps scale
    noise up to the learning rate, so even PyTorch in fp32 and in fp64 differ by 0.04 in
    the second step's loss. Here they differ by 5e-5."""
    import torchvision
    torch.manual_seed(0)
    return _classifier_spec(torchvision.models.resnet18(num_classes=10), mode, (4, 3, 64, 64), 10)


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


# Minimal programs that write in place through views, update buffers through aliases, make
# constants inside forward, or run RNNs: each once silently wrong or refused (issue 15).

class _ViewWrite(nn.Module):
    """y[0].add_(1): the write reaches y through a view."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        y[0].add_(1.0)
        return y


class _PermutedViewWrite(nn.Module):
    """z[1].add_(1) where z = lin(x).t() * 2 is dense but permuted (strides [1, n]): in the
    joint graph autograd's CopySlices writes the gradient through as_strided of
    new_empty_strided(z's sizes and strides), which addresses z's permuted memory."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        z = self.lin(x).t() * 2
        z[1].add_(1.0)
        z[:, 1:3].mul_(3.0)
        return (z * z).t()


class _BufferSliceWrite(nn.Module):
    """self.count[:2].add_(1): a buffer updated through a slice."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("count", torch.zeros(4))

    def forward(self, x):
        self.count[:2].add_(1)
        return self.lin(x) + self.count


class _Constant(nn.Module):
    """A tensor made inside forward (a get_attr constant in the traced graph)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x) * torch.tensor([1.0, 2.0, 3.0, 4.0])


class _Rnn(nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.rnn = cell(4, 6, num_layers=2, batch_first=True)
        self.head = nn.Linear(6, 3)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


class _ComplexHalf(nn.Module):
    """complex32 (chalf) end to end, with ops LibTorch's CPU kernels have for it (1.13 and
    2.x: conversions, complex(), mul, add, neg, cat, select_scatter, view_as_real; not sum,
    div, mm, exp or fft) and a write through a view of a chalf tensor."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        z = y.chalf() * x.chalf() + torch.complex(y.half(), x.half())
        w = torch.cat([z, -z])
        w[0].mul_(2)
        return torch.view_as_real(w).float().reshape(3, -1)


def _small_spec(model, mode, x, classes):
    torch.manual_seed(1)
    if mode == "joint":
        model.train()
        target = torch.randint(0, classes, (x.shape[0],))
        return ModelSpec(model, (x,), lambda out, t: F.cross_entropy(out, t), (target,))
    model.eval()
    return ModelSpec(model, (x,))


class _Bf16Mlp(nn.Module):
    """fp32 weights the forward computes with in bf16 (what autocast does, written out)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        h = F.linear(x.bfloat16(), self.fc1.weight.bfloat16(), self.fc1.bias.bfloat16()).relu()
        return F.linear(h, self.fc2.weight.bfloat16(), self.fc2.bias.bfloat16()).float()


def bf16_mlp(mode="forward"):
    """magi/frontend/fx:fx_trainer_options_test's model."""
    torch.manual_seed(0)
    return _small_spec(_Bf16Mlp(), mode, torch.randn(4, 8), 4)


def view_write(mode="forward"):
    torch.manual_seed(0)
    return _small_spec(_ViewWrite(), mode, torch.randn(3, 4), 4)


def permuted_view_write(mode="forward"):
    torch.manual_seed(0)
    return _small_spec(_PermutedViewWrite(), mode, torch.randn(3, 4), 4)


def buffer_slice_write(mode="forward"):
    torch.manual_seed(0)
    return _small_spec(_BufferSliceWrite(), mode, torch.randn(3, 4), 4)


def complex_half(mode="forward"):
    torch.manual_seed(0)
    return _small_spec(_ComplexHalf(), mode, torch.randn(3, 4), 16)


def instance_norm_stats(mode="forward"):
    """InstanceNorm2d with running statistics in training writes copy_(alias(running_mean), ...)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.InstanceNorm2d(4, track_running_stats=True), nn.Flatten(),
                          nn.Linear(4 * 6 * 6, 5))
    spec = _small_spec(model, mode, torch.randn(2, 3, 8, 8), 5)
    if mode == "forward":
        model.train()  # the running statistics update in forward too
    return spec


def constant(mode="forward"):
    torch.manual_seed(0)
    return _small_spec(_Constant(), mode, torch.randn(3, 4), 4)


def lstm(mode="forward"):
    torch.manual_seed(0)
    return _small_spec(_Rnn(nn.LSTM), mode, torch.randn(2, 5, 4), 3)


def gru(mode="forward"):
    torch.manual_seed(0)
    return _small_spec(_Rnn(nn.GRU), mode, torch.randn(2, 5, 4), 3)


def convnext(mode="forward"):
    """torchvision's ConvNeXt, two small stages (LayerNorm2d, stochastic depth off in eval)."""
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt
    torch.manual_seed(0)
    model = ConvNeXt([CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)], stochastic_depth_prob=0.0,
                     num_classes=10)
    return _classifier_spec(model, mode, (2, 3, 32, 32), 10)


def swin(mode="forward"):
    """torchvision's Swin Transformer (shifted windows: its attention mask is built with
    writes to slices), two small stages."""
    from torchvision.models.swin_transformer import SwinTransformer
    torch.manual_seed(0)
    model = SwinTransformer(patch_size=[2, 2], embed_dim=16, depths=[2, 2], num_heads=[2, 2], window_size=[4, 4],
                            stochastic_depth_prob=0.0, num_classes=10)
    return _classifier_spec(model, mode, (2, 3, 32, 32), 10)


def convnext_tiny_narrow(mode="forward"):
    """torchvision's convnext_tiny with a sixth of its channels (16, 32, 64, 128 instead of 96 ...
    768): every stage, block (3, 3, 9, 3), downsampling layer, layer scale and stochastic depth of
    the real one, so the same graph node for node (autograd's new_empty -> zero_ -> as_strided ->
    copy_ in the joint graph), with 0.8 M parameters instead of 28 M. 10 classes, two 64x64 images,
    as tv_convnext_tiny."""
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt
    torch.manual_seed(0)
    model = ConvNeXt([CNBlockConfig(16, 32, 3), CNBlockConfig(32, 64, 3), CNBlockConfig(64, 128, 9),
                      CNBlockConfig(128, None, 3)], stochastic_depth_prob=0.1, num_classes=10)
    return _classifier_spec(model, mode, (2, 3, 64, 64), 10)


def swin_t_narrow(mode="forward"):
    """torchvision's swin_t with a quarter of its width (embed_dim 24 instead of 96; the same heads,
    8 wide): every stage (2, 2, 6, 2 blocks), the 7x7 windows, their shifts and attention masks
    (built with writes to slices), the maps padded to whole windows (16x16 to 21x21, 8x8 to 14x14)
    and the unshifted windows of the later stages, where one window covers the map, so the same
    graph node for node, with 1.8 M parameters instead of 28 M. 10 classes, two 64x64 images, as
    tv_swin_t."""
    from torchvision.models.swin_transformer import SwinTransformer
    torch.manual_seed(0)
    model = SwinTransformer(patch_size=[4, 4], embed_dim=24, depths=[2, 2, 6, 2], num_heads=[3, 6, 12, 24],
                            window_size=[7, 7], stochastic_depth_prob=0.2, num_classes=10)
    return _classifier_spec(model, mode, (2, 3, 64, 64), 10)


def embedding_bag(mode="forward"):
    """EmbeddingBag (sum, per-sample weights): its backward rebuilds offset2bag with
    index_add_ and a sub_ through select(offset2bag) (issue 15: that write was lost)."""
    torch.manual_seed(0)

    class Bag(nn.Module):
        def __init__(self):
            super().__init__()
            self.bag = nn.EmbeddingBag(20, 6, mode="sum")
            self.head = nn.Linear(6, 3)

        def forward(self, tokens, offsets, weights):
            return self.head(self.bag(tokens, offsets, per_sample_weights=weights))

    tokens = torch.randint(0, 20, (10,))
    offsets = torch.tensor([0, 3, 7])
    weights = torch.randn(10)
    model = Bag()
    if mode == "joint":
        target = torch.randint(0, 3, (3,))
        return ModelSpec(model, (tokens, offsets, weights), lambda out, t: F.cross_entropy(out, t), (target,))
    model.eval()
    return ModelSpec(model, (tokens, offsets, weights))


def __getattr__(name):
    """tv_<name>: torchvision.models.<name>(num_classes=10) on 2 images of 64x64 (any
    torchvision classifier, e.g. --spec tools.fx_models:tv_convnext_tiny)."""
    if not name.startswith("tv_"):
        raise AttributeError(name)

    def spec(mode="forward"):
        import torchvision
        torch.manual_seed(0)
        kwargs = {"num_classes": 10}
        if name[3:] in ("googlenet", "inception_v3"):
            kwargs.update(aux_logits=False, init_weights=True)
        model = getattr(torchvision.models, name[3:])(**kwargs)
        return _classifier_spec(model, mode, (2, 3, 64, 64), 10)

    return spec


# examples:train_vision's model, exported at build time by examples/BUILD (joint and forward).
TRAIN_VISION_BATCH = 32  # images per rank per step: the joint graph's batch
TRAIN_VISION_EVAL_BATCH = 100  # images per run of the forward (eval) graph
TRAIN_VISION_IMAGE = 32  # pixels per side (examples/shapes_dataset.h draws at any size)


def train_vision(mode="forward"):
    """examples:train_vision's model: torchvision's ResNet with one BasicBlock per stage
    (resnet18 has two; 4.9 M parameters instead of 11.2 M, and about half the time per step
    on this machine's CPUs), 10 classes, as torchvision builds and initializes it (seed 0),
    for 32 x 32 images: TRAIN_VISION_BATCH per rank in joint mode (BatchNorm in training),
    TRAIN_VISION_EVAL_BATCH in forward mode (eval)."""
    from torchvision.models.resnet import BasicBlock, ResNet
    torch.manual_seed(0)
    model = ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10)
    batch = TRAIN_VISION_BATCH if mode == "joint" else TRAIN_VISION_EVAL_BATCH
    return _classifier_spec(model, mode, (batch, 3, TRAIN_VISION_IMAGE, TRAIN_VISION_IMAGE), 10)


def train_vision_resnet18(mode="forward"):
    """The same with torchvision's resnet18 (11.2 M parameters): export it with
    tools/fx_export.py and pass it to examples:train_vision with --joint and --forward."""
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    batch = TRAIN_VISION_BATCH if mode == "joint" else TRAIN_VISION_EVAL_BATCH
    return _classifier_spec(model, mode, (batch, 3, TRAIN_VISION_IMAGE, TRAIN_VISION_IMAGE), 10)
