#!/usr/bin/env python3
"""A stand-in for examples:generate in generate_1b_test.py: takes the flags generate_1b.py passes, and
answers as the binary does (the tiny model's twin in fp32 on the CPU, greedy, full recompute):
--dump_weights writes the fp32 parameters, --logits_out prompt.<i>.logits [length, vocab] and
prompt.<i>.tokens, stderr carries the "magi: KV cache", "magi: prefill:", "magi: decode:" and
"magi: peak device memory" lines in examples/generate.cc's formats (the times are made up).
Not a model of Magi's speed: it lets the harness run end to end without the C++ build.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "pytorch"))

import torch  # noqa: E402

import generate_llama  # noqa: E402
import llama  # noqa: E402
import tensor_file  # noqa: E402


def main(argv):
    flags = {}
    for arg in argv:
        if not arg.startswith("--"):
            sys.exit("fake generate: unexpected argument %r" % arg)
        key, _, value = arg[2:].partition("=")
        flags[key] = value if _ else "true"
    if os.environ.get("MAGI_FAKE_GENERATE_FAIL"):
        sys.exit("fake generate: asked to fail (MAGI_FAKE_GENERATE_FAIL)")
    config = llama.LlamaConfig.preset(flags.get("model", "tiny"))
    config.vocab_size = 256
    seq, length, batch = int(flags["seq_len"]), int(flags["length"]), int(flags.get("batch_size", "1"))
    config.max_seq_len = max(config.max_seq_len, seq)
    torch.manual_seed(int(flags.get("init_seed", "0")))
    model = llama.Llama(config).eval()
    if flags.get("dump_weights"):
        llama.save_magi_weights(model, flags["dump_weights"])
    prompts = generate_llama.read_prompts(flags["prompts_file"])
    tokens, logits = generate_llama.generate_full_recompute(model, generate_llama.prompt_tensor(prompts, batch),
                                                            length)
    sys.stderr.write("magi: KV cache %d bytes per rank (%d layers x K,V [%d, %d, %d, %d]); decode step planned peak "
                     "1000 bytes with the cache donated (updated in place), 2000 without (1000 more)\n" %
                     (2 * config.n_layers * batch * config.n_heads * seq * config.head_dim * 4, config.n_layers, batch,
                      config.n_heads, seq, config.head_dim))
    prompt_bytes = batch * len(prompts[0])
    sys.stderr.write("magi: generated %d x %d bytes in 0.50 s (%.1f bytes/s; %d forwards of %d sequences, KV cache)\n" %
                     (batch, length, batch * length / 0.5, length, batch))
    sys.stderr.write("magi: prefill: 1 runs, %d sequences (0 after a context overflow), %d context bytes (%d bucket "
                     "positions) in 0.020 s: %.1f bytes/s (%.1f positions/s)\n" %
                     (batch, prompt_bytes, batch * seq, prompt_bytes / 0.02, batch * seq / 0.02))
    steps = length - 1
    sys.stderr.write("magi: decode: %d steps of %d sequences, %d bytes in %.3f s: %.1f bytes/s\n" %
                     (steps, batch, steps * batch, 0.004 * steps, batch / 0.004))
    sys.stderr.write("magi: peak device memory 123456789 bytes\n")
    if flags.get("logits_out"):
        dump = []
        for i in range(len(prompts)):
            dump += [("prompt.%d.logits" % i, logits[i]), ("prompt.%d.tokens" % i, tokens[i])]
        tensor_file.write_tensors(flags["logits_out"], dump)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
