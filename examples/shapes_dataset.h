// A procedurally generated 10-class image dataset for examples:train_vision: no download,
// the same bytes for the same seed on every machine and every run.
//
// Image k of a dataset is drawn from its own pseudo-random stream (SplitMix64 of the seed
// and k), so any slice can be generated alone, and a train/test split is two disjoint index
// ranges of one dataset. Its class is k % 10 (every 10 consecutive images hold each class
// once). Each image shows one object of its class on a background with a colour gradient:
//
//   0 disk        1 ring         2 square      3 triangle    4 cross
//   5 frame       6 stripes      7 checker     8 dots        9 crescent
//
// (frame: the outline of a square; stripes, checker, dots: a textured disk). Position,
// size, rotation, colours, contrast, texture period and phase are random; a small blob of
// another colour is added to half the images; then Gaussian pixel noise of standard
// deviation `noise` (on the [0, 1] scale). Pairs such as disk/crescent, ring/frame and
// dots/checker at low contrast make it far from trivial: accuracy is informative.
//
//   ShapesOptions options;  // 32 x 32, noise 0.05, seed 0
//   absl::StatusOr<ShapesBatch> train = GenerateShapes(options, 0, 4000);
//   // train->pixels: 4000 x 3 x 32 x 32 floats, normalized as (v - 0.5) / 0.25
//
// What it does NOT do: it is not a natural-image benchmark; accuracies on it say that a
// model learns, not how it would do on CIFAR-10. Pixels are computed in double precision
// with the C library's sin/cos/sqrt, so the bytes are the same wherever those round alike
// (IEEE libm on x86-64 and AArch64 do).
//
// No LibTorch here: the example turns the vectors into tensors.
#ifndef MAGI_EXAMPLES_SHAPES_DATASET_H_
#define MAGI_EXAMPLES_SHAPES_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace magi {

inline constexpr int kShapeClasses = 10;

// "disk", "ring", ..., "crescent" for 0..9; "?" otherwise.
const char* ShapeClassName(int label);

struct ShapesOptions {
  int64_t height = 32;  // pixels, each in [8, 1024]
  int64_t width = 32;
  double noise = 0.05;  // standard deviation of the pixel noise, in [0, 1]
  uint64_t seed = 0;
};

struct ShapesBatch {
  int64_t count = 0;
  std::vector<float> pixels;   // count x 3 x height x width, row-major, (v - 0.5) / 0.25
  std::vector<int64_t> labels;  // count, in [0, kShapeClasses)
};

// Images [first, first + count) of the dataset `options` describes. InvalidArgument naming
// the field for a size out of range, a noise that is negative, above 1 or not finite, a
// negative `first` or `count`, or more than 2^31 pixels in all.
absl::StatusOr<ShapesBatch> GenerateShapes(const ShapesOptions& options, int64_t first, int64_t count);

// A permutation of [0, n), the same for the same (seed, epoch): the order in which an epoch
// visits the training images (Fisher-Yates on SplitMix64).
std::vector<int64_t> EpochOrder(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace magi

#endif  // MAGI_EXAMPLES_SHAPES_DATASET_H_
