// Exact checkpoint placement for a cached prefix: O(m L) with the monotone convex-hull trick.
// The Python spec is lcr.checkpoints.reference.reference_dp (O(m L^2)).
//
// Depths d = 0..L carry weights w(d). With P(x) = sum_{d<x} w(d) and Q(x) = sum_{d<x} d w(d),
// serving depths [a, b) from a checkpoint at a costs C(a, b) = Q(b) - Q(a) - a (P(b) - P(a)), and
//   F_0(b) = C(0, b),   F_j(b) = min_{0 <= a < b} F_{j-1}(a) + C(a, b).
// Picking a = 0 means "one checkpoint fewer", so F_j is the best cost with at most j checkpoints.
// Rewritten as  F_j(b) = Q(b) + min_a [ -a P(b) + (F_{j-1}(a) - Q(a) + a P(a)) ],
// every a is a line with slope -a (decreasing as a grows) queried at P(b) (non-decreasing in b).
//
// Ties go to the smallest a, so among equal-cost plans the one with fewer / earlier checkpoints
// wins. With integer weights and W L^2 < 2^53 (W = total weight) every value below is an integer
// held exactly in a double, so the plan is fully determined and equals the reference's; the
// hull's cross products use long double (64-bit mantissa) to stay exact as long as possible.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

#include "cpu/registry.h"

namespace py = pybind11;

namespace lcr {
namespace {

struct Line {
    double slope;      // -a
    double intercept;  // F_{j-1}(a) - Q(a) + a P(a)
    int32_t a;
    double at(double x) const { return intercept + slope * x; }
};

// True when `mid` is nowhere strictly below min(left, right): it can leave the hull.
// Slopes strictly decrease left -> mid -> right, and
// mid is useless iff x(left, right) <= x(left, mid), with x(u, v) = (c_v - c_u) / (k_u - k_v).
bool redundant(const Line& left, const Line& mid, const Line& right) {
    const double lhs = (right.intercept - left.intercept) * (left.slope - mid.slope);
    const double rhs = (mid.intercept - left.intercept) * (left.slope - right.slope);
    // Each product is within a few ulps; decide in double unless the two are that close.
    if (std::fabs(lhs - rhs) > 1e-12 * (std::fabs(lhs) + std::fabs(rhs))) return lhs < rhs;
    using ld = long double;
    const ld lhs_ld = (static_cast<ld>(right.intercept) - left.intercept) * (static_cast<ld>(left.slope) - mid.slope);
    const ld rhs_ld = (static_cast<ld>(mid.intercept) - left.intercept) * (static_cast<ld>(left.slope) - right.slope);
    return lhs_ld <= rhs_ld;
}

struct Solution {
    std::vector<double> cost;                  // cost[j]: optimum with at most j checkpoints
    std::vector<std::vector<int32_t>> plans;   // plans[j]: its positions, increasing
};

Solution solve(const std::vector<double>& w, int budget) {
    const int32_t L = static_cast<int32_t>(w.size()) - 1;
    const size_t n = static_cast<size_t>(L) + 2;  // b = 0..L+1
    std::vector<double> P(n, 0.0), Q(n, 0.0);
    for (int32_t d = 0; d <= L; ++d) {
        P[d + 1] = P[d] + w[d];
        Q[d + 1] = Q[d] + static_cast<double>(d) * w[d];
    }
    // Layers past L cannot add a new position.
    const int layers = std::min<int64_t>(budget, L);

    std::vector<double> prev(n), cur(n);
    for (size_t b = 0; b < n; ++b) prev[b] = Q[b];  // F_0(b) = C(0, b) = Q(b)

    Solution out;
    out.cost.assign(static_cast<size_t>(budget) + 1, 0.0);
    out.plans.assign(static_cast<size_t>(budget) + 1, {});
    out.cost[0] = prev[n - 1];

    // choice[(j - 1) * n + b]: the argmin a of F_j(b).
    std::vector<int32_t> choice(static_cast<size_t>(layers) * n, 0);
    std::vector<Line> hull(n);
    int solved = 0;
    for (int j = 1; j <= layers; ++j) {
        if (prev[n - 1] <= 0.0) break;  // nothing left to save: more checkpoints change nothing
        int32_t* arg = choice.data() + static_cast<size_t>(j - 1) * n;
        size_t head = 0, tail = 0;  // hull[head, tail)
        cur[0] = 0.0;
        for (size_t b = 1; b < n; ++b) {
            const int32_t a = static_cast<int32_t>(b - 1);
            const Line line{-static_cast<double>(a), prev[a] - Q[a] + a * P[a], a};
            while (tail - head >= 2 && redundant(hull[tail - 2], hull[tail - 1], line)) --tail;
            hull[tail++] = line;
            const double x = P[b];
            // Strict '<': on a tie the front line (smaller a) stays.
            while (tail - head >= 2 && hull[head + 1].at(x) < hull[head].at(x)) ++head;
            cur[b] = Q[b] + hull[head].at(x);
            arg[b] = hull[head].a;
        }
        std::swap(prev, cur);
        solved = j;
        out.cost[j] = prev[n - 1];
    }

    for (int j = 1; j <= budget; ++j) {
        const int k = std::min(j, solved);
        if (k < j) {  // no layer was solved for j: it is as good as the last one
            out.cost[j] = out.cost[k];
            out.plans[j] = out.plans[k];
            continue;
        }
        std::vector<int32_t> positions;
        size_t b = n - 1;
        for (int layer = k; layer >= 1; --layer) {
            const int32_t a = choice[static_cast<size_t>(layer - 1) * n + b];
            if (a == 0) break;
            positions.push_back(a);
            b = static_cast<size_t>(a);
        }
        out.plans[j].assign(positions.rbegin(), positions.rend());
    }
    return out;
}

// Returns (cost, plans): both indexed by budget j = 0..max_budget, cost[j] in the units of the
// weights (divide by their sum for an expectation).
py::tuple checkpoint_dp(py::array_t<double, py::array::c_style | py::array::forcecast> weights, int max_budget) {
    if (weights.ndim() != 1 || weights.size() < 2)
        throw std::invalid_argument("weights must be 1-D with at least two depths (L >= 1)");
    if (weights.size() - 1 > INT32_MAX - 2) throw std::invalid_argument("prefix too long");
    if (max_budget < 1) throw std::invalid_argument("max_budget must be >= 1");
    std::vector<double> w(weights.data(), weights.data() + weights.size());
    for (double v : w)
        if (!(v >= 0.0) || !std::isfinite(v)) throw std::invalid_argument("weights must be finite and >= 0");
    Solution sol;
    {
        py::gil_scoped_release release;
        sol = solve(w, max_budget);
    }
    return py::make_tuple(sol.cost, sol.plans);
}

}  // namespace

void register_checkpoints(py::module_& m) {
    m.def("checkpoint_dp", &checkpoint_dp, py::arg("weights"), py::arg("max_budget"),
          "Optimal checkpoint positions for every budget 0..max_budget: (costs, plans).");
}

}  // namespace lcr
