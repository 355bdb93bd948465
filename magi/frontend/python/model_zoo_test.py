"""torch.compile(backend="magi") equals eager PyTorch on a zoo of models, forward (eval) and
forward + backward (train: loss, every parameter's gradient, buffers written in forward such
as BatchNorm's running statistics), on CPU with the interpreter.

Bitwise unless TOLERANCE names the model: the compiled graphs call the same ATen kernels as
eager on the same data. The models are tools/fx_models.py's (the FX importer's test models:
torchvision classifiers, in-place writes through views, buffers written through slices, RNNs,
constants made in forward) and, when transformers is installed, Hugging Face's
LlamaForCausalLM and GPT-2 built from small configs with random weights (no download).
"""

import copy
import os
import sys
import unittest

import torch
import torch._dynamo

import magi  # noqa: F401  (registers backend="magi")

sys.path.insert(0, os.getcwd())  # the workspace root (Bazel runs tests there): tools.fx_models
from tools import fx_models  # noqa: E402

# lstm: under Dynamo nn.LSTM becomes aten::mkldnn_rnn_layer, whose CPU kernel returns an undefined
# workspace outside training where the traced value is an empty tensor (step_plan.h, CallOperator);
# in training that workspace has a size only the kernel knows, so its training graph is refused.
FX_MODELS = ["resnet18", "mobilenet_v2", "vit", "convnext", "swin", "llama", "view_write", "permuted_view_write",
             "buffer_slice_write", "instance_norm_stats", "constant", "gru", "lstm", "embedding_bag"]
# Models whose training graph Magi refuses, and the error that must say why.
REFUSED_TRAINING = {"lstm": "LSTM training from this trace is not supported"}
# Largest difference allowed relative to max(1, |eager|), by model; absent: bitwise.
TOLERANCE = {}


def _hf_spec(name, mode):
    import transformers
    torch.manual_seed(0)
    if name == "hf_llama":
        config = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
        model = transformers.LlamaForCausalLM(config)
    else:
        config = transformers.GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model = transformers.GPT2LMHeadModel(config)
    model.config.use_cache = False
    tokens = torch.randint(0, 128, (2, 12))

    class Logits(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, tokens):
            return self.inner(input_ids=tokens, use_cache=False).logits

    wrapped = Logits(model)
    if mode == "joint":
        wrapped.train()
        targets = torch.randint(0, 128, (2, 12))
        return fx_models.ModelSpec(wrapped, (tokens,), lambda logits, t: torch.nn.functional.cross_entropy(
            logits.reshape(-1, 128), t.reshape(-1)), (targets,))
    wrapped.eval()
    return fx_models.ModelSpec(wrapped, (tokens,))


def _has_transformers():
    try:
        import transformers  # noqa: F401
        return True
    except ImportError:
        return False


def _spec(name, mode):
    return _hf_spec(name, mode) if name.startswith("hf_") else getattr(fx_models, name)(mode=mode)


def _difference(got, expected):
    got, expected = got.detach(), expected.detach()
    if got.shape != expected.shape or got.dtype != expected.dtype:
        return float("inf")
    if not expected.is_floating_point() and not expected.is_complex():
        return 0.0 if torch.equal(got, expected) else float("inf")
    if torch.equal(got, expected):
        return 0.0
    diff = (got.double() - expected.double()).abs().max().item()
    return diff / max(1.0, expected.double().abs().max().item())


class ModelZooTest(unittest.TestCase):
    def setUp(self):
        torch._dynamo.reset()
        # Dynamo traces nn.LSTM/GRU only when asked (otherwise a graph break: fullgraph fails).
        patch = torch._dynamo.config.patch(allow_rnn=True)
        patch.__enter__()
        self.addCleanup(patch.__exit__, None, None, None)

    def assertClose(self, name, what, got, expected):
        limit = TOLERANCE.get(name, 0.0)
        diff = _difference(got, expected)
        self.assertLessEqual(diff, limit, "%s: %s differs from eager by %g (allowed %g)" % (name, what, diff, limit))

    def check_forward(self, name):
        spec = _spec(name, "forward")
        eager_model = copy.deepcopy(spec.model)
        compiled = torch.compile(spec.model, backend="magi", dynamic=False, fullgraph=True)
        with torch.no_grad():
            got = compiled(*spec.inputs)
            expected = eager_model(*spec.inputs)
        for k, (g, e) in enumerate(zip(_tuple(got), _tuple(expected))):
            self.assertClose(name, "output %d" % k, g, e)
        for (buffer, g), (_, e) in zip(spec.model.named_buffers(), eager_model.named_buffers()):
            self.assertClose(name, "buffer %s" % buffer, g, e)

    def check_train(self, name):
        spec = _spec(name, "joint")
        eager_model = copy.deepcopy(spec.model)
        compiled = torch.compile(spec.model, backend="magi", dynamic=False, fullgraph=True)
        loss = spec.loss_fn(compiled(*spec.inputs), *spec.loss_inputs)
        loss.backward()
        expected = spec.loss_fn(eager_model(*spec.inputs), *spec.loss_inputs)
        expected.backward()
        self.assertClose(name, "loss", loss, expected)
        for (param, p), (_, q) in zip(spec.model.named_parameters(), eager_model.named_parameters()):
            if q.grad is None:
                self.assertIsNone(p.grad, "%s: %s has a gradient, eager's has none" % (name, param))
                continue
            self.assertIsNotNone(p.grad, "%s: %s has no gradient" % (name, param))
            self.assertClose(name, "%s.grad" % param, p.grad, q.grad)
        for (buffer, g), (_, e) in zip(spec.model.named_buffers(), eager_model.named_buffers()):
            self.assertClose(name, "buffer %s" % buffer, g, e)


def _tuple(value):
    return tuple(value) if isinstance(value, (list, tuple)) else (value,)


def _add_tests(name, skip=None):
    def forward(self):
        self.check_forward(name)

    def train(self):
        if name in REFUSED_TRAINING:
            with self.assertRaisesRegex(Exception, REFUSED_TRAINING[name]):
                self.check_train(name)
            return
        self.check_train(name)

    for kind, test in (("forward", forward), ("train", train)):
        if skip:
            test = unittest.skip(skip)(test)
        setattr(ModelZooTest, "test_%s_%s" % (name, kind), test)


for _name in FX_MODELS:
    _add_tests(_name)
# --require_transformers (the BUILD passes it where the lock installs transformers: 2.12):
# a missing transformers fails instead of skipping.
_REQUIRE_TRANSFORMERS = "--require_transformers" in sys.argv
if _REQUIRE_TRANSFORMERS:
    sys.argv.remove("--require_transformers")
for _name in ("hf_llama", "hf_gpt2"):
    _add_tests(_name, None if _has_transformers() or _REQUIRE_TRANSFORMERS else "transformers is not installed")


def _shard(names):
    """Bazel's test sharding (shard_count in the BUILD): this shard's tests, round robin."""
    total, index = int(os.environ.get("TEST_TOTAL_SHARDS", "1")), int(os.environ.get("TEST_SHARD_INDEX", "0"))
    if "TEST_SHARD_STATUS_FILE" in os.environ:
        open(os.environ["TEST_SHARD_STATUS_FILE"], "w").close()  # tells Bazel the test shards
    return [name for k, name in enumerate(sorted(names)) if k % total == index]


if __name__ == "__main__":
    loader = unittest.TestLoader()
    names = _shard(loader.getTestCaseNames(ModelZooTest))
    suite = unittest.TestSuite(ModelZooTest(name) for name in names)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)
