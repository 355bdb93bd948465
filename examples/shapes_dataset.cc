#include "examples/shapes_dataset.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace magi {
namespace {

constexpr double kPi = 3.14159265358979323846;

uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// SplitMix64: small, fast, and its streams for different seeds do not overlap in practice.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() { return Mix64(state_ += 0x9E3779B97F4A7C15ULL); }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  double Normal() {  // Box-Muller, both values used
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = 1.0 - Uniform();  // (0, 1]: log is finite
    double u2 = Uniform();
    double radius = std::sqrt(-2.0 * std::log(u1));
    spare_ = radius * std::sin(2 * kPi * u2);
    has_spare_ = true;
    return radius * std::cos(2 * kPi * u2);
  }

 private:
  uint64_t state_;
  double spare_ = 0;
  bool has_spare_ = false;
};

struct Rgb {
  double c[3];
};

Rgb RandomColour(Rng& rng) { return {{rng.Uniform(), rng.Uniform(), rng.Uniform()}}; }

double Distance(const Rgb& a, const Rgb& b) {
  double sum = 0;
  for (int i = 0; i < 3; ++i) sum += (a.c[i] - b.c[i]) * (a.c[i] - b.c[i]);
  return std::sqrt(sum);
}

double Clamp01(double v) { return std::min(1.0, std::max(0.0, v)); }

// Signed distance (pixels; negative inside) to an axis-aligned box of half sizes hx, hy.
double Box(double u, double v, double hx, double hy) {
  double qx = std::abs(u) - hx, qy = std::abs(v) - hy;
  double outside = std::hypot(std::max(qx, 0.0), std::max(qy, 0.0));
  return outside + std::min(std::max(qx, qy), 0.0);
}

// Signed distance to an equilateral triangle of half side `a`, centred, pointing up (-v).
double Triangle(double u, double v, double a) {
  const double k = std::sqrt(3.0);
  double x = std::abs(u) - a, y = -v + a / k;
  if (x + k * y > 0) {
    double nx = (x - k * y) / 2, ny = (-k * x - y) / 2;
    x = nx;
    y = ny;
  }
  x -= std::min(std::max(x, -2 * a), 0.0);
  return -std::hypot(x, y) * (y > 0 ? 1.0 : -1.0);
}

// One image's random parameters, drawn in a fixed order from its own stream.
struct Scene {
  int label;
  double cx, cy, r, cos_t, sin_t;
  Rgb bg0, bg1, fg;
  double grad_x, grad_y, contrast;
  double period, phase_u, phase_v;
  bool blob;
  double blob_x, blob_y, blob_r;
  Rgb blob_colour;
};

Scene DrawScene(Rng& rng, int label, double height, double width) {
  Scene s;
  s.label = label;
  const double size = std::min(height, width);
  s.cx = rng.Uniform(0.3, 0.7) * width;
  s.cy = rng.Uniform(0.3, 0.7) * height;
  s.r = rng.Uniform(0.28, 0.4) * size;
  const double theta = rng.Uniform(0, 2 * kPi);
  s.cos_t = std::cos(theta);
  s.sin_t = std::sin(theta);
  // Background colours half as saturated as drawn (pulled halfway to their grey).
  for (Rgb* bg : {&s.bg0, &s.bg1}) {
    *bg = RandomColour(rng);
    const double grey = (bg->c[0] + bg->c[1] + bg->c[2]) / 3;
    for (double& c : bg->c) c = grey + 0.5 * (c - grey);
  }
  const double phi = rng.Uniform(0, 2 * kPi);
  s.grad_x = std::cos(phi) / width;
  s.grad_y = std::sin(phi) / height;
  Rgb mean{{(s.bg0.c[0] + s.bg1.c[0]) / 2, (s.bg0.c[1] + s.bg1.c[1]) / 2, (s.bg0.c[2] + s.bg1.c[2]) / 2}};
  // A foreground colour away from the background's mean (the last draw is kept after 32).
  for (int attempt = 0; attempt < 32; ++attempt) {
    s.fg = RandomColour(rng);
    if (Distance(s.fg, mean) >= 0.6) break;
  }
  s.contrast = rng.Uniform(0.8, 1.0);
  s.period = rng.Uniform(0.15, 0.22) * size;
  s.phase_u = rng.Uniform();
  s.phase_v = rng.Uniform();
  s.blob = rng.Uniform() < 0.3;
  s.blob_x = rng.Uniform(0, width);
  s.blob_y = rng.Uniform(0, height);
  s.blob_r = rng.Uniform(0.04, 0.08) * size;
  s.blob_colour = RandomColour(rng);
  return s;
}

// How much of the pixel at (u, v) (object coordinates, pixels) the object covers, in [0, 1]:
// a signed distance turned into coverage with a one-pixel soft edge.
double Coverage(const Scene& s, double u, double v) {
  const double r = s.r;
  auto edge = [](double distance) { return Clamp01(0.5 - distance); };
  const double radius = std::hypot(u, v);
  switch (s.label) {
    case 0:  // disk
      return edge(radius - r);
    case 1:  // ring
      return edge(std::abs(radius - 0.72 * r) - 0.28 * r);
    case 2:  // square
      return edge(Box(u, v, 0.8 * r, 0.8 * r));
    case 3:  // triangle
      return edge(Triangle(u, v, 0.95 * r));
    case 4:  // cross
      return edge(std::min(Box(u, v, r, 0.3 * r), Box(u, v, 0.3 * r, r)));
    case 5:  // frame
      return edge(std::abs(Box(u, v, 0.7 * r, 0.7 * r)) - 0.15 * r);
    case 6: {  // stripes
      double wave = std::sin(2 * kPi * (u / s.period + s.phase_u));
      return edge(radius - r) * Clamp01(0.5 + s.period / (2 * kPi) * wave);
    }
    case 7: {  // checker
      double wave = std::sin(2 * kPi * (u / s.period + s.phase_u)) * std::sin(2 * kPi * (v / s.period + s.phase_v));
      return edge(radius - r) * Clamp01(0.5 + 1.5 * s.period / (2 * kPi) * wave);
    }
    case 8: {  // dots
      double fu = u / s.period + s.phase_u, fv = v / s.period + s.phase_v;
      fu -= std::floor(fu) + 0.5;
      fv -= std::floor(fv) + 0.5;
      return edge(radius - r) * edge(s.period * (std::hypot(fu, fv) - 0.28));
    }
    case 9:  // crescent: a disk with a bite
      return edge(std::max(radius - r, 0.8 * r - std::hypot(u - 0.5 * r, v)));
  }
  return 0;
}

}  // namespace

const char* ShapeClassName(int label) {
  static const char* const kNames[kShapeClasses] = {"disk",    "ring",    "square", "triangle", "cross",
                                                    "frame",   "stripes", "checker", "dots",   "crescent"};
  return label >= 0 && label < kShapeClasses ? kNames[label] : "?";
}

absl::StatusOr<ShapesBatch> GenerateShapes(const ShapesOptions& options, int64_t first, int64_t count) {
  if (options.height < 8 || options.height > 1024 || options.width < 8 || options.width > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("shapes dataset: images of ", options.height, " x ",
                                                   options.width, " pixels; each side must be in [8, 1024]"));
  }
  if (!std::isfinite(options.noise) || options.noise < 0 || options.noise > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("shapes dataset: noise ", options.noise, " must be a finite number in [0, 1]"));
  }
  if (first < 0 || count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shapes dataset: images [", first, ", ", first, " + ", count, ") is not a range"));
  }
  const int64_t plane = options.height * options.width;
  if (count > (int64_t{1} << 31) / (3 * plane)) {
    return absl::InvalidArgumentError(absl::StrCat("shapes dataset: ", count, " images of ", options.height, " x ",
                                                   options.width, " exceed 2^31 pixels"));
  }
  ShapesBatch batch;
  batch.count = count;
  batch.pixels.resize(count * 3 * plane);
  batch.labels.resize(count);
  const double height = static_cast<double>(options.height), width = static_cast<double>(options.width);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t index = first + i;
    Rng rng(Mix64(Mix64(options.seed) ^ Mix64(static_cast<uint64_t>(index) + 0x632BE59BD9B4E019ULL)));
    const int label = static_cast<int>(index % kShapeClasses);
    batch.labels[i] = label;
    const Scene s = DrawScene(rng, label, height, width);
    float* out = batch.pixels.data() + i * 3 * plane;
    for (int64_t y = 0; y < options.height; ++y) {
      for (int64_t x = 0; x < options.width; ++x) {
        const double px = x + 0.5, py = y + 0.5, dx = px - s.cx, dy = py - s.cy;
        const double u = s.cos_t * dx + s.sin_t * dy, v = -s.sin_t * dx + s.cos_t * dy;
        const double along = Clamp01(0.5 + (px - width / 2) * s.grad_x + (py - height / 2) * s.grad_y);
        const double cover = Coverage(s, u, v) * s.contrast;
        const double blob = s.blob ? Clamp01(0.5 - (std::hypot(px - s.blob_x, py - s.blob_y) - s.blob_r)) : 0.0;
        for (int c = 0; c < 3; ++c) {
          double value = s.bg0.c[c] + (s.bg1.c[c] - s.bg0.c[c]) * along;
          value += (s.fg.c[c] - value) * cover;
          value += (s.blob_colour.c[c] - value) * blob;
          value = Clamp01(value + options.noise * rng.Normal());
          out[c * plane + y * options.width + x] = static_cast<float>((value - 0.5) / 0.25);
        }
      }
    }
  }
  return batch;
}

std::vector<int64_t> EpochOrder(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(std::max<int64_t>(n, 0));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  Rng rng(Mix64(Mix64(seed ^ 0xA0761D6478BD642FULL) ^ Mix64(static_cast<uint64_t>(epoch))));
  for (int64_t i = n - 1; i > 0; --i) {
    int64_t j = static_cast<int64_t>(rng.Next() % static_cast<uint64_t>(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace magi
