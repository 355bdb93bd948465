// The budget frontier (SearchFrontier's points) as an SVG chart: predicted step time
// against the memory budget per rank, one marker per budget with a plan, a cross on the
// axis where nothing fits, and the exposed communication of each plan as a second,
// dashed line. Plain SVG 1.1 text (opens in any browser); it does not write files
// (`magi plan --frontier --svg=OUT` writes it atomically).
//
//   std::string svg = FrontierSvg(points, "8B step, h200");
#ifndef MAGI_SEARCH_FRONTIER_SVG_H_
#define MAGI_SEARCH_FRONTIER_SVG_H_

#include <string>
#include <vector>

#include "magi/search/strategy_search.h"

namespace magi {

// `title` is escaped; points may come in any order (they are drawn by budget).
std::string FrontierSvg(const std::vector<FrontierPoint>& points, const std::string& title);

}  // namespace magi

#endif  // MAGI_SEARCH_FRONTIER_SVG_H_
