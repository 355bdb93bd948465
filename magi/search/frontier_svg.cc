#include "magi/search/frontier_svg.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace magi {
namespace {

constexpr double kWidth = 720, kHeight = 420;
constexpr double kLeft = 70, kRight = 20, kTop = 40, kBottom = 50;

std::string Escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

// A "nice" tick step (1, 2 or 5 times a power of ten) for about `ticks` ticks over `span`.
double TickStep(double span, int ticks) {
  if (!(span > 0)) return 1;
  double raw = span / ticks;
  double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * power >= raw) return m * power;
  }
  return 10 * power;
}

}  // namespace

std::string FrontierSvg(const std::vector<FrontierPoint>& points, const std::string& title) {
  std::vector<const FrontierPoint*> sorted;
  for (const FrontierPoint& point : points) sorted.push_back(&point);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const FrontierPoint* a, const FrontierPoint* b) { return a->budget_bytes < b->budget_bytes; });
  double x_min = INFINITY, x_max = -INFINITY, y_max = 0;
  for (const FrontierPoint* point : sorted) {
    double gb = point->budget_bytes / 1e9;
    x_min = std::min(x_min, gb);
    x_max = std::max(x_max, gb);
    if (point->status.ok()) y_max = std::max(y_max, point->plan.chosen.prediction.step_seconds * 1e3);
  }
  if (sorted.empty()) x_min = 0, x_max = 1;
  if (x_max <= x_min) x_max = x_min + 1;
  if (y_max <= 0) y_max = 1;
  const double x_step = TickStep(x_max - x_min, 8);
  const double y_step = TickStep(y_max, 6);
  y_max = std::ceil(y_max * 1.05 / y_step) * y_step;
  const double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  auto x_of = [&](double gb) { return kLeft + (gb - x_min) / (x_max - x_min) * plot_w; };
  auto y_of = [&](double ms) { return kTop + plot_h - ms / y_max * plot_h; };

  std::string svg = absl::StrFormat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%.0f\" y=\"22\" font-size=\"14\">%s</text>\n",
      kWidth, kHeight, kWidth, kHeight, kLeft, Escape(title));
  // Axes, grid and ticks.
  absl::StrAppendFormat(&svg, "<g stroke=\"#ccc\">\n");
  for (double ms = 0; ms <= y_max + y_step / 2; ms += y_step) {
    absl::StrAppendFormat(&svg, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", kLeft, y_of(ms),
                          kLeft + plot_w, y_of(ms));
  }
  absl::StrAppend(&svg, "</g>\n<g text-anchor=\"end\">\n");
  for (double ms = 0; ms <= y_max + y_step / 2; ms += y_step) {
    absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%.1f\">%g</text>\n", kLeft - 6, y_of(ms) + 4, ms);
  }
  absl::StrAppend(&svg, "</g>\n<g text-anchor=\"middle\">\n");
  for (double gb = std::ceil(x_min / x_step) * x_step; gb <= x_max + x_step / 1e6; gb += x_step) {
    absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%.1f\">%g</text>\n", x_of(gb), kTop + plot_h + 18, gb);
  }
  absl::StrAppendFormat(&svg,
                        "<text x=\"%.1f\" y=\"%.1f\">memory budget per rank (GB)</text>\n</g>\n"
                        "<text transform=\"translate(16 %.1f) rotate(-90)\" text-anchor=\"middle\">predicted step "
                        "(ms)</text>\n"
                        "<path d=\"M%.1f %.1fV%.1fH%.1f\" fill=\"none\" stroke=\"black\"/>\n",
                        kLeft + plot_w / 2, kHeight - 10, kTop + plot_h / 2, kLeft, kTop, kTop + plot_h,
                        kLeft + plot_w);
  // The two lines, then markers (with the plan as a tooltip) and crosses where nothing fits.
  std::string step_line, exposed_line;
  for (const FrontierPoint* point : sorted) {
    if (!point->status.ok()) continue;
    const SimulationResult& p = point->plan.chosen.prediction;
    double x = x_of(point->budget_bytes / 1e9);
    absl::StrAppendFormat(&step_line, "%s%.1f %.1f", step_line.empty() ? "M" : "L", x, y_of(p.step_seconds * 1e3));
    absl::StrAppendFormat(&exposed_line, "%s%.1f %.1f", exposed_line.empty() ? "M" : "L", x,
                          y_of(p.exposed_communication_seconds * 1e3));
  }
  if (!step_line.empty()) {
    absl::StrAppendFormat(&svg, "<path d=\"%s\" fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\"/>\n", step_line);
    absl::StrAppendFormat(&svg,
                          "<path d=\"%s\" fill=\"none\" stroke=\"#ff7f0e\" stroke-width=\"1.5\" "
                          "stroke-dasharray=\"5 4\"/>\n",
                          exposed_line);
  }
  for (const FrontierPoint* point : sorted) {
    double x = x_of(point->budget_bytes / 1e9);
    if (!point->status.ok()) {
      double y = kTop + plot_h;
      absl::StrAppendFormat(&svg,
                            "<path d=\"M%.1f %.1fl8 8m0 -8l-8 8\" stroke=\"#d62728\" stroke-width=\"2\"><title>%.3f "
                            "GB: %s</title></path>\n",
                            x - 4, y - 4, point->budget_bytes / 1e9, Escape(std::string(point->status.message())));
      continue;
    }
    const SimulationResult& p = point->plan.chosen.prediction;
    absl::StrAppendFormat(&svg,
                          "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"#1f77b4\"><title>%.3f GB: %.3f ms, "
                          "peak %.3f GB: %s</title></circle>\n",
                          x, y_of(p.step_seconds * 1e3), point->budget_bytes / 1e9, p.step_seconds * 1e3,
                          p.peak_bytes / 1e9, Escape(point->plan.pipeline));
  }
  // Legend.
  absl::StrAppendFormat(&svg,
                        "<g font-size=\"11\"><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#1f77b4\" "
                        "stroke-width=\"2\"/><text x=\"%.1f\" y=\"%.1f\">step time</text>\n"
                        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ff7f0e\" "
                        "stroke-dasharray=\"5 4\"/><text x=\"%.1f\" y=\"%.1f\">exposed communication</text>\n"
                        "<text x=\"%.1f\" y=\"%.1f\" fill=\"#d62728\">x: nothing fits</text></g>\n",
                        kWidth - 190, kTop + 8, kWidth - 165, kTop + 8, kWidth - 160, kTop + 12, kWidth - 190,
                        kTop + 26, kWidth - 165, kTop + 26, kWidth - 160, kTop + 30, kWidth - 190, kTop + 48);
  absl::StrAppend(&svg, "</svg>\n");
  return svg;
}

}  // namespace magi
