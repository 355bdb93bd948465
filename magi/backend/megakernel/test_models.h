// Test helper: decode model shapes the tests share (no LibTorch).
#ifndef MAGI_BACKEND_MEGAKERNEL_TEST_MODELS_H_
#define MAGI_BACKEND_MEGAKERNEL_TEST_MODELS_H_

#include <cstdint>

#include "magi/backend/megakernel/decode_model.h"

namespace magi::megakernel::testing {

// The tiny Llama with grouped-query attention (2 kv heads of 4), the shape of
// testdata/decode_tiny_gqa_bf16_batch2.mir at any batch.
inline DecodeModel TinyGqaModel(int64_t batch) {
  DecodeModel m;
  m.batch = batch;
  m.dim = 64;
  m.n_layers = 2;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.head_dim = 16;
  m.ffn_hidden = 176;
  m.vocab = 256;
  m.window = 32;
  return m;
}

}  // namespace magi::megakernel::testing

#endif  // MAGI_BACKEND_MEGAKERNEL_TEST_MODELS_H_
