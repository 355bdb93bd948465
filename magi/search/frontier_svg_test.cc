#include "magi/search/frontier_svg.h"

#include <cstdio>

#include "gtest/gtest.h"

namespace magi {
namespace {

FrontierPoint Fits(double gb, double ms, const std::string& pipeline) {
  FrontierPoint point;
  point.budget_bytes = static_cast<int64_t>(gb * 1e9);
  point.plan.chosen.prediction.step_seconds = ms / 1e3;
  point.plan.chosen.prediction.exposed_communication_seconds = ms / 1e4;
  point.plan.chosen.prediction.peak_bytes = point.budget_bytes - 1;
  point.plan.pipeline = pipeline;
  return point;
}

int Count(const std::string& text, const std::string& what) {
  int count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

TEST(FrontierSvgTest, OneMarkerPerPlanACrossWhereNothingFitsInBudgetOrder) {
  FrontierPoint none;
  none.budget_bytes = 30000000000;
  none.status = absl::FailedPreconditionError("no strategy fits <30 GB>");
  std::vector<FrontierPoint> points = {Fits(45, 280, "schedule-overlap{prefetch=4}"), none,
                                       Fits(40, 290, "a,b")};
  std::string svg = FrontierSvg(points, "8B & co");
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("</svg>\n"), std::string::npos);
  EXPECT_EQ(Count(svg, "<circle"), 2);
  EXPECT_NE(svg.find("8B &amp; co"), std::string::npos);             // the title is escaped
  EXPECT_NE(svg.find("no strategy fits &lt;30 GB&gt;"), std::string::npos);  // and so are reasons
  EXPECT_NE(svg.find("40.000 GB: 290.000 ms"), std::string::npos);
  // The step line goes left to right: the 40 GB point (x smaller) comes first.
  size_t line = svg.find("stroke=\"#1f77b4\" stroke-width=\"2\"/>");
  ASSERT_NE(line, std::string::npos);
  size_t path = svg.rfind("<path d=\"M", line);
  std::string d = svg.substr(path, line - path);
  double x0 = 0, x1 = 0, y0 = 0, y1 = 0;
  ASSERT_EQ(std::sscanf(d.c_str(), "<path d=\"M%lf %lfL%lf %lf", &x0, &y0, &x1, &y1), 4) << d;
  EXPECT_LT(x0, x1);
  EXPECT_LT(y0, y1);  // 290 ms is drawn higher (smaller y) than 280 ms
}

TEST(FrontierSvgTest, EmptyAndDegenerateInputsStillDraw) {
  EXPECT_NE(FrontierSvg({}, "").find("</svg>"), std::string::npos);
  std::string one = FrontierSvg({Fits(10, 0, "")}, "t");
  EXPECT_EQ(one.find("nan"), std::string::npos);
  EXPECT_EQ(one.find("inf"), std::string::npos);
}

}  // namespace
}  // namespace magi
