// A regression forest with LightGBM's numerical split rule, evaluated natively.
//
// lightgbm's Python predict costs ~5 ms of fixed overhead per call on this machine, more
// than walking 16 small trees for 25k rows. lcr.predict.forest flattens a fitted booster
// (its model text) into these arrays once per fit; predictions must equal booster.predict.
//
// Two evaluations, the same answers:
// - walk: each tree from its root, one data-dependent branch per level. With 15-leaf
//   trees the branches mispredict often (a branch-free walk measured slower still).
// - masks (QuickScorer's idea, Lucchese et al. 2015): a tree's leaves are bits of a
//   word, left to right; a split the row does not take to the left rules out every leaf
//   of its left subtree, and the row's leaf is the lowest bit left standing. Every split
//   on a feature that a value sends right is a prefix of that feature's thresholds in
//   ascending order, so one branch-free binary search per feature (over its distinct
//   thresholds: trees often split at the same bin boundary) picks a precomputed AND of
//   those prefixes' masks for all trees at once, a few rows side by side. No per-level
//   branches; used when every tree has at most 64 leaves and the forest fits kMaxWords
//   words.
//
// Rows picked by index lie scattered over a feature matrix far larger than the caches;
// walked one after another, each row's first touch stalls on a memory miss. So large
// batches are visited in row order (InRowOrder) and both evaluations prefetch the rows
// kPrefetchAhead positions ahead: their misses overlap (25k rows of 26 features from a
// 65k-row matrix, walked in the caller's order: 3.6 ms against 3.1 on contiguous rows,
// benchmarks/predictor_latency.py --evaluations; 2.0x the contiguous time while the
// prefetch was lost, see prefetch_row).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cpu/answer_rule.h"
#include "cpu/model_stream.h"
#include "cpu/registry.h"

namespace py = pybind11;

namespace lcr {
namespace {

// LightGBM's missing-value handling of a numerical split.
enum MissingType : uint8_t { kMissingNone = 0, kMissingZero = 1, kMissingNaN = 2 };
constexpr double kZeroThreshold = 1e-35;

struct Node {
    double threshold;
    int32_t feature, left, right;  // children: >= 0 an internal node, < 0 leaf ~child
    uint8_t missing, default_left;
};

// One split, LightGBM's rule: NaN counts as 0 unless the split routes NaN; a missing
// value (NaN, or 0 for zero-as-missing splits) takes the default side.
bool goes_left(const Node& node, double raw) {
    const bool nan = std::isnan(raw);
    const double value = nan && node.missing != kMissingNaN ? 0.0 : raw;
    const bool is_missing = node.missing == kMissingNaN ? nan
                          : node.missing == kMissingZero && std::fabs(value) <= kZeroThreshold;
    return is_missing ? node.default_left != 0 : value <= node.threshold;
}

// The forest as leaf masks (see the top of the file), built from the walk's nodes.
class MaskForest {
public:
    static constexpr int kMaxWords = 16;  // 64 trees of <= 16 leaves, 16 trees of <= 64
    static constexpr int kRowBlock = 4;   // rows side by side; 8: faster on 4 features, slower on 26

    // Empty (unusable: `usable()` is false) when a tree has more than 64 leaves or the
    // masks would exceed kMaxWords words.
    MaskForest(const std::vector<Node>& nodes, const std::vector<double>& leaf_value,
               const std::vector<int32_t>& roots, int32_t num_features) {
        const auto trees = static_cast<int32_t>(roots.size());
        // Per tree: its leaves left to right; per node: its tree and its left subtree's leaves.
        std::vector<int32_t> node_tree(nodes.size()), left_begin(nodes.size()), left_end(nodes.size());
        std::vector<std::vector<double>> tree_leaves(trees);
        size_t most_leaves = 1;
        for (int32_t t = 0; t < trees; ++t) {
            auto& leaves = tree_leaves[t];
            // Returns the leaf count of the subtree at `child`, numbering its leaves from leaves.size().
            auto visit = [&](auto&& self, int32_t child) -> void {
                if (child < 0) {
                    leaves.push_back(leaf_value[~child]);
                    return;
                }
                node_tree[child] = t;
                left_begin[child] = static_cast<int32_t>(leaves.size());
                self(self, nodes[child].left);
                left_end[child] = static_cast<int32_t>(leaves.size());
                self(self, nodes[child].right);
            };
            visit(visit, roots[t]);
            most_leaves = std::max(most_leaves, leaves.size());
        }
        lane_bits_ = most_leaves <= 16 ? 16 : most_leaves <= 32 ? 32 : most_leaves <= 64 ? 64 : 0;
        if (lane_bits_ == 0) return;
        const int lanes_per_word = 64 / lane_bits_;
        int words = 2;  // a power of two, two at least: whole 16-byte vectors (Pair), a compiled width
        while (words * lanes_per_word < trees) words *= 2;
        if (words > kMaxWords) return;
        words_ = words;
        trees_ = trees;
        leaf_by_bit_.assign(static_cast<size_t>(trees) * lane_bits_, 0.0);
        for (int32_t t = 0; t < trees; ++t) {
            std::copy(tree_leaves[t].begin(), tree_leaves[t].end(), leaf_by_bit_.begin() + t * lane_bits_);
        }

        // A node's mask: all ones but the leaves of its left subtree in its tree's lane.
        auto apply_mask = [&](uint64_t* acc, int32_t node) {
            const int32_t t = node_tree[node];
            const int shift = (t % lanes_per_word) * lane_bits_;
            const int count = left_end[node] - left_begin[node];
            const uint64_t ones = count == 64 ? ~0ULL : (1ULL << count) - 1;
            acc[t / lanes_per_word] &= ~(ones << (left_begin[node] + shift));
        };
        std::vector<std::vector<int32_t>> by_feature(num_features);
        for (size_t i = 0; i < nodes.size(); ++i) by_feature[nodes[i].feature].push_back(static_cast<int32_t>(i));
        for (int32_t f = 0; f < num_features; ++f) {
            auto& split = by_feature[f];
            if (split.empty()) continue;
            std::stable_sort(split.begin(), split.end(),
                             [&](int32_t a, int32_t b) { return nodes[a].threshold < nodes[b].threshold; });
            Feature entry{};
            entry.feature = f;
            entry.count = static_cast<uint32_t>(split.size());
            entry.thresholds = static_cast<uint32_t>(thresholds_.size());
            entry.masks = static_cast<uint32_t>(masks_.size() / words_);
            entry.splits = static_cast<uint32_t>(split_nodes_.size());
            for (int32_t node : split) {
                split_nodes_.push_back(nodes[node]);
                split_masks_.insert(split_masks_.end(), words_, ~0ULL);
                apply_mask(&split_masks_[split_masks_.size() - words_], node);
                entry.zero_missing |= nodes[node].missing == kMissingZero;
            }
            // Masks 0..distinct: a value that is not missing goes right at exactly the
            // splits with threshold < value (LightGBM's `value <= threshold` is false), a
            // prefix. Trees often split a feature at the same bin boundary, so the search
            // runs over distinct thresholds, each mask ruling out all splits at it.
            std::vector<uint64_t> acc(words_, ~0ULL);
            masks_.insert(masks_.end(), acc.begin(), acc.end());
            for (size_t i = 0; i < split.size(); ++i) {
                apply_mask(acc.data(), split[i]);
                if (i + 1 < split.size() && nodes[split[i + 1]].threshold == nodes[split[i]].threshold) continue;
                thresholds_.push_back(nodes[split[i]].threshold);
                masks_.insert(masks_.end(), acc.begin(), acc.end());
            }
            const uint32_t distinct = static_cast<uint32_t>(thresholds_.size()) - entry.thresholds;
            while ((1u << entry.steps) < distinct + 1) ++entry.steps;
            thresholds_.resize(entry.thresholds + (1u << entry.steps), std::numeric_limits<double>::infinity());
            // Mask distinct + 1: NaN, by the split rule itself.
            masks_.insert(masks_.end(), words_, ~0ULL);
            mask_of_value(entry, std::numeric_limits<double>::quiet_NaN(), &masks_[masks_.size() - words_]);
            entry.nan_mask = entry.masks + distinct + 1;
            features_.push_back(entry);
        }
        // Runs of features searched alike: by depth, zero-as-missing ones apart (see Group).
        std::stable_sort(features_.begin(), features_.end(), [](const Feature& a, const Feature& b) {
            return std::make_pair(a.zero_missing, a.steps) < std::make_pair(b.zero_missing, b.steps);
        });
        for (uint32_t i = 0; i < features_.size(); ++i) {
            const Feature& f = features_[i];
            const bool same = !groups_.empty() && groups_.back().steps == f.steps &&
                              groups_.back().zero_missing == f.zero_missing;
            if (same) {
                ++groups_.back().end;
            } else {
                groups_.push_back({i, i + 1, f.steps, f.zero_missing});
            }
        }
    }

    bool usable() const { return words_ > 0; }

    // The sum of the leaf values of each row row_at(r), r in [begin, end), handed to sink(r, sum).
    template <typename RowAt, typename Prefetch, typename Sink>
    void evaluate(RowAt row_at, Prefetch prefetch, int64_t begin, int64_t end, Sink sink) const {
        switch (words_) {
            case 2: return evaluate_pairs<1>(row_at, prefetch, begin, end, sink);
            case 4: return evaluate_pairs<2>(row_at, prefetch, begin, end, sink);
            case 8: return evaluate_pairs<4>(row_at, prefetch, begin, end, sink);
            case 16: return evaluate_pairs<8>(row_at, prefetch, begin, end, sink);
        }
        throw std::logic_error("forest: no mask evaluation for this width");
    }

private:
    struct Feature {
        int32_t feature;
        uint32_t count;       // splits on the feature
        uint32_t steps;       // binary search steps: distinct thresholds padded with +inf to 2^steps
        uint32_t thresholds;  // offset of the sorted thresholds in thresholds_
        uint32_t masks;       // index of the feature's distinct + 1 prefix masks in masks_ (in words_ units)
        uint32_t nan_mask;    // index of its mask for NaN (masks + distinct thresholds + 1)
        uint32_t splits;      // offset of the sorted splits in split_nodes_ / split_masks_
        bool zero_missing;    // a split takes |value| <= kZeroThreshold as missing
    };

    // features_[begin, end): searched to the same depth, with or without zero-as-missing splits.
    struct Group {
        uint32_t begin, end, steps;
        bool zero_missing;
    };

    // The AND of the masks of the feature's splits that `value` does not send left, by the rule.
    void mask_of_value(const Feature& entry, double value, uint64_t* out) const {
        for (uint32_t i = 0; i < entry.count; ++i) {
            if (goes_left(split_nodes_[entry.splits + i], value)) continue;
            const uint64_t* mask = &split_masks_[(entry.splits + i) * static_cast<size_t>(words_)];
            for (int w = 0; w < words_; ++w) out[w] &= mask[w];
        }
    }

    // Two mask words: one SSE2 register, so the ANDs take a vector instruction per pair.
    using Pair = uint64_t __attribute__((vector_size(16)));

    static Pair load_pair(const uint64_t* words) {
        Pair pair;
        std::memcpy(&pair, words, sizeof(pair));
        return pair;
    }

    // Rows go in blocks of kRowBlock, each step of their searches side by side: a
    // binary search is a chain of dependent loads, and one row's chains alone leave the
    // core waiting. (With the branch-free step and the distinct thresholds: masks in row
    // order, 25k rows, belady model 3.0 -> 2.4 ms, compact 2.1 -> 1.3,
    // benchmarks/predictor_latency.py --evaluations.)
    template <int P, typename RowAt, typename Prefetch, typename Sink>
    void evaluate_pairs(RowAt row_at, Prefetch prefetch, int64_t begin, int64_t end, Sink sink) const {
        int64_t r = begin;
        for (; r + kRowBlock <= end; r += kRowBlock) evaluate_block<P, kRowBlock>(row_at, prefetch, r, sink);
        for (; r < end; ++r) evaluate_block<P, 1>(row_at, prefetch, r, sink);
    }

    template <int P, int B, typename RowAt, typename Prefetch, typename Sink>
    void evaluate_block(RowAt row_at, Prefetch prefetch, int64_t first_row, Sink sink) const {
        const double* rows[B];
        for (int b = 0; b < B; ++b) {
            prefetch(first_row + b);
            rows[b] = row_at(first_row + b);
        }
        Pair acc[B][P];
        for (int b = 0; b < B; ++b) {
            for (int p = 0; p < P; ++p) acc[b][p] = ~Pair{};
        }
        for (const Group& group : groups_) {
            const Feature* first = &features_[group.begin];
            const Feature* last = &features_[group.end];
            if (group.zero_missing) {
                for (int b = 0; b < B; ++b) and_zero_missing<P>(first, last, rows[b], &acc[b]);
                continue;
            }
            // A fixed search depth per run: the compiler unrolls each search.
            switch (group.steps) {
                case 1: and_searched<P, B, 1>(first, last, rows, acc); break;
                case 2: and_searched<P, B, 2>(first, last, rows, acc); break;
                case 3: and_searched<P, B, 3>(first, last, rows, acc); break;
                case 4: and_searched<P, B, 4>(first, last, rows, acc); break;
                case 5: and_searched<P, B, 5>(first, last, rows, acc); break;
                case 6: and_searched<P, B, 6>(first, last, rows, acc); break;
                case 7: and_searched<P, B, 7>(first, last, rows, acc); break;
                default: and_searched<P, B, 0>(first, last, rows, acc); break;  // depth read at run time
            }
        }
        uint64_t words[B][2 * P];
        std::memcpy(words, acc, sizeof(words));
        double sums[B];
        switch (lane_bits_) {
            case 16: leaf_sums<B, 2 * P, 16>(words, sums); break;
            case 32: leaf_sums<B, 2 * P, 32>(words, sums); break;
            default: leaf_sums<B, 2 * P, 64>(words, sums); break;
        }
        for (int b = 0; b < B; ++b) sink(first_row + b, sums[b]);
    }

    // Features of one run, B rows side by side: AND the mask each value picks into
    // acc[b]. Steps > 0 is the search depth of every feature in the run; 0 reads it
    // from each feature.
    template <int P, int B, int Steps>
    void and_searched(const Feature* first, const Feature* last, const double* const* rows, Pair (*acc)[P]) const {
        const double* thresholds = thresholds_.data();
        const uint64_t* masks = masks_.data();
        for (const Feature* entry = first; entry != last; ++entry) {
            double value[B];
            bool any_value = false;
            for (int b = 0; b < B; ++b) {
                value[b] = rows[b][entry->feature];
                any_value |= !std::isnan(value[b]);
            }
            // NaN takes its own mask; any other value the mask of the splits with
            // threshold < value. (Most NaN are in columns that are nearly always NaN, so
            // the branch predicts well and skips their searches.)
            uint32_t pick[B];
            for (int b = 0; b < B; ++b) pick[b] = entry->nan_mask;
            if (any_value) {
                const double* threshold = thresholds + entry->thresholds;
                uint32_t below[B] = {};
                const uint32_t steps = Steps > 0 ? Steps : entry->steps;
                for (uint32_t step = (1u << steps) >> 1; step > 0; step >>= 1) {
                    // A product, not `?:`: GCC compiled the conditional into a branch,
                    // taken at random, a misprediction every other step.
                    for (int b = 0; b < B; ++b) below[b] += (threshold[below[b] + step - 1] < value[b]) * step;
                }
                for (int b = 0; b < B; ++b) {
                    if (!std::isnan(value[b])) pick[b] = entry->masks + below[b];
                }
            }
            for (int b = 0; b < B; ++b) {
                const uint64_t* mask = masks + static_cast<size_t>(pick[b]) * (2 * P);
                for (int p = 0; p < P; ++p) acc[b][p] &= load_pair(mask + 2 * p);
            }
        }
    }

    // Features with a zero-as-missing split: values within kZeroThreshold of 0 go by the rule.
    template <int P>
    void and_zero_missing(const Feature* first, const Feature* last, const double* row, Pair (*acc)[P]) const {
        for (const Feature* entry = first; entry != last; ++entry) {
            const double value = row[entry->feature];
            if (std::fabs(value) <= kZeroThreshold) {
                uint64_t words[2 * P];
                std::memcpy(words, *acc, sizeof(words));
                mask_of_value(*entry, value, words);
                std::memcpy(*acc, words, sizeof(words));
            } else {
                and_searched<P, 1, 0>(entry, entry + 1, &row, acc);
            }
        }
    }

    // Each row's answer: per tree the leaf at the lowest bit standing in its lane, summed
    // in LightGBM's order, tree by tree from 0.0 (another order changes the last bits).
    // The lane width is a constant, so the lanes of a word unroll.
    template <int B, int W, int LaneBits>
    void leaf_sums(const uint64_t (*words)[W], double* sums) const {
        constexpr int kLanes = 64 / LaneBits;
        for (int b = 0; b < B; ++b) sums[b] = 0.0;
        const double* leaves = leaf_by_bit_.data();
        int32_t tree = 0;
        int w = 0;
        for (; tree + kLanes <= trees_; tree += kLanes, ++w, leaves += 64) {
            for (int lane = 0; lane < kLanes; ++lane) {
                for (int b = 0; b < B; ++b) sums[b] += leaves[lane * LaneBits + __builtin_ctzll(words[b][w] >> (lane * LaneBits))];
            }
        }
        for (int lane = 0; tree < trees_; ++lane, ++tree) {  // a last word with fewer trees
            for (int b = 0; b < B; ++b) sums[b] += leaves[lane * LaneBits + __builtin_ctzll(words[b][w] >> (lane * LaneBits))];
        }
    }

    int lane_bits_ = 0;  // bits per tree: 16, 32 or 64
    int words_ = 0;      // 64-bit words of masks per row; 0: unusable
    int32_t trees_ = 0;
    std::vector<Feature> features_;   // the features some split reads, in runs (groups_)
    std::vector<Group> groups_;
    std::vector<double> thresholds_;  // per feature: ascending, padded with +inf
    std::vector<uint64_t> masks_;     // per feature: distinct thresholds + 2 masks of words_ words
    std::vector<Node> split_nodes_;   // per feature: its splits, ascending threshold
    std::vector<uint64_t> split_masks_;  // one mask per split, same order
    std::vector<double> leaf_by_bit_;    // tree t's leaf at bit b: [t * lane_bits_ + b]
};

class Forest {
public:
    Forest(std::vector<int32_t> feature, std::vector<double> threshold, std::vector<int32_t> left,
           std::vector<int32_t> right, std::vector<uint8_t> missing, std::vector<uint8_t> default_left,
           std::vector<double> leaf_value, std::vector<int32_t> roots, int32_t num_features,
           const std::string& method)
        : leaf_value_(std::move(leaf_value)), roots_(std::move(roots)), num_features_(num_features),
          masks_(std::nullopt) {
        const size_t count = feature.size();
        if (threshold.size() != count || left.size() != count || right.size() != count ||
            missing.size() != count || default_left.size() != count) {
            throw std::invalid_argument("forest: node arrays differ in length");
        }
        if (method != "auto" && method != "walk" && method != "masks") {
            throw std::invalid_argument("forest: method must be 'auto', 'walk' or 'masks'");
        }
        auto check_child = [&](int32_t child) {
            const bool ok = child >= 0 ? static_cast<size_t>(child) < count
                                       : static_cast<size_t>(~child) < leaf_value_.size();
            if (!ok) throw std::invalid_argument("forest: child index out of range");
        };
        nodes_.reserve(count);
        for (size_t i = 0; i < count; ++i) {
            if (feature[i] < 0 || feature[i] >= num_features_ || missing[i] > kMissingNaN) {
                throw std::invalid_argument("forest: split feature or missing type out of range");
            }
            check_child(left[i]);
            check_child(right[i]);
            nodes_.push_back({threshold[i], feature[i], left[i], right[i], missing[i], default_left[i]});
        }
        for (int32_t root : roots_) check_child(root);
        if (method != "walk") {
            MaskForest masks(nodes_, leaf_value_, roots_, num_features_);
            if (masks.usable()) {
                masks_.emplace(std::move(masks));
            } else if (method == "masks") {
                throw std::invalid_argument("forest: too many leaves or trees for the mask evaluation");
            }
        }
    }

    using Rows = py::array_t<double, py::array::c_style | py::array::forcecast>;
    using Index = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

    // Rows ``index[i]`` of ``rows`` (all rows when index is None): reading them in place
    // spares the caller a gathered copy of a feature matrix.
    py::array_t<double> predict(const Rows& rows, const std::optional<Index>& index, int threads) const {
        check_rows(rows);
        const int64_t* picked = index ? index->data() : nullptr;
        const int64_t n = index ? index->size() : rows.shape(0);
        for (int64_t i = 0; picked && i < n; ++i) {
            if (picked[i] < 0 || picked[i] >= rows.shape(0)) throw std::out_of_range("forest: row index out of range");
        }
        py::array_t<double> out(n);
        const double* data = rows.data();
        double* result = out.mutable_data();
        py::gil_scoped_release release;
        if (!picked) {
            evaluate(data, nullptr, n, threads, [result](int64_t r, double sum) { result[r] = sum; });
            return out;
        }
        const InRowOrder order(picked, nullptr, n, rows.shape(0));
        const int64_t* position = order.positions.data();
        evaluate(data, order.rows.data(), n, threads, [=](int64_t k, double sum) { result[position[k]] = sum; });
        return out;
    }

    // The whole batch answer in one pass, no intermediate arrays: per slot (-1: a key
    // never seen, NaN), the rule's answer from row rows[slot] and last_times[slot]. With
    // a memo (per slot, NaN = unknown) known offsets are reused and new ones stored.
    py::array_t<double> answers(const Rows& rows, const Index& slots, const Rows& last_times, const AnswerRule& rule,
                                std::optional<py::array_t<double, py::array::c_style>> memo, int threads) const {
        check_rows(rows);
        const int64_t available = rows.shape(0);
        if (last_times.ndim() != 1 || last_times.shape(0) < available ||
            (memo && (memo->ndim() != 1 || memo->shape(0) < available))) {
            throw std::invalid_argument("forest: last_times and memo need one value per row");
        }
        const int64_t n = slots.size();
        const int64_t* slot = slots.data();
        for (int64_t i = 0; i < n; ++i) {
            if (slot[i] < -1 || slot[i] >= available) throw std::out_of_range("forest: row index out of range");
        }
        py::array_t<double> out(n);
        double* result = out.mutable_data();
        const double* last = last_times.data();
        double* known = memo ? memo->mutable_data() : nullptr;
        const double* data = rows.data();
        py::gil_scoped_release release;
        // Answer unknown keys and memoised rows now; evaluate the others in row order.
        std::vector<int64_t> todo(n);
        int64_t count = 0;
        for (int64_t i = 0; i < n; ++i) {
            if (slot[i] < 0) {
                result[i] = std::numeric_limits<double>::quiet_NaN();
            } else if (known && !std::isnan(known[slot[i]])) {
                result[i] = rule.place(known[slot[i]], last[slot[i]]);
            } else {
                todo[count++] = i;
            }
        }
        const InRowOrder order(slot, todo.data(), count, available);
        const int64_t* row_of = order.rows.data();
        const int64_t* position = order.positions.data();
        evaluate(data, row_of, count, threads, [=, &rule](int64_t k, double sum) {
            const int64_t row = row_of[k];
            const double offset = rule.offset(sum);
            // A key named twice in the batch is evaluated twice, maybe on two threads.
            if (known) __atomic_store(&known[row], &offset, __ATOMIC_RELAXED);
            result[position[k]] = rule.place(offset, last[row]);
        });
        return out;
    }

    size_t num_trees() const { return roots_.size(); }
    std::string method() const { return masks_ ? "masks" : "walk"; }

    static constexpr py::ssize_t kMinRowsPerThread = 4096;

private:
    static constexpr int64_t kPrefetchAhead = 8;  // rows; 4..64 measured alike
    static constexpr int64_t kSortFrom = 1024;    // rows picked; fewer fit the caches anyway
    static constexpr int kCacheLine = 64;

    void check_rows(const Rows& rows) const {
        if (rows.ndim() != 2 || rows.shape(1) != num_features_) {
            throw std::invalid_argument("forest: rows must be a 2-D array with " +
                                        std::to_string(num_features_) + " columns");
        }
    }

    // The sum of the trees' leaves of each row picked[k] of data (row k when picked is
    // null), k < n, handed to sink(k, sum) on the thread that computed it. Picked rows are
    // best given in ascending order (see InRowOrder).
    template <typename Sink>
    void evaluate(const double* data, const int64_t* picked, int64_t n, int threads, Sink sink) const {
        auto row_at = [&](int64_t r) { return data + (picked ? picked[r] : r) * num_features_; };
        auto evaluate_share = [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < std::min(end, begin + kPrefetchAhead); ++r) prefetch_row(row_at(r));
            auto prefetch = [&](int64_t r) {
                if (r + kPrefetchAhead < end) prefetch_row(row_at(r + kPrefetchAhead));
            };
            if (masks_) return masks_->evaluate(row_at, prefetch, begin, end, sink);
            for (int64_t r = begin; r < end; ++r) {
                prefetch(r);
                sink(r, walk(row_at(r)));
            }
        };
        // Threads only pay off on large batches; each takes a contiguous share of rows.
        const auto workers = std::clamp<int64_t>(std::min<int64_t>(threads, n / kMinRowsPerThread), 1, 64);
        std::vector<std::thread> pool;
        for (int64_t w = 1; w < workers; ++w) pool.emplace_back(evaluate_share, n * w / workers, n * (w + 1) / workers);
        evaluate_share(0, n / workers);
        for (auto& worker : pool) worker.join();
    }

    // The rows picked[at[j]] (at null: picked[j]), j < n, all < available, in ascending
    // order, near enough, with the positions they were picked at: a counting sort on the
    // rows' top bits, about one bucket per row. Rows picked at random from a matrix larger
    // than the caches cost a memory miss each; visited in order they stream, on top of
    // the prefetch (25k of 65k rows of 26 features: walk 2.95 -> 2.86 ms, 3%, same
    // benchmark; 1.5x while the prefetch was lost). Small batches keep their order: their
    // rows fit the caches anyway.
    struct InRowOrder {
        std::vector<int64_t> rows, positions;

        InRowOrder(const int64_t* picked, const int64_t* at, int64_t n, int64_t available)
            : rows(n), positions(n) {
            auto position = [&](int64_t j) { return at ? at[j] : j; };
            if (n < kSortFrom) {
                for (int64_t j = 0; j < n; ++j) rows[j] = picked[positions[j] = position(j)];
                return;
            }
            int shift = 0;
            while ((available >> shift) > 2 * n) ++shift;
            std::vector<uint32_t> start(static_cast<size_t>((available >> shift) + 2), 0);
            for (int64_t j = 0; j < n; ++j) ++start[(picked[position(j)] >> shift) + 1];
            std::partial_sum(start.begin(), start.end(), start.begin());
            for (int64_t j = 0; j < n; ++j) {
                const int64_t p = position(j), row = picked[p];
                const uint32_t k = start[row >> shift]++;
                rows[k] = row;
                positions[k] = p;
            }
        }
    };

    // Every cache line of one row (a row need not start on a line).
    void prefetch_row(const double* row) const {
        const char* bytes = reinterpret_cast<const char*>(row);
        const int size = num_features_ * static_cast<int>(sizeof(double));
        for (int offset = 0; offset < size; offset += kCacheLine) __builtin_prefetch(bytes + offset);
        __builtin_prefetch(bytes + size - 1);
        // GCC 12 finds a function that only prefetches free of side effects and drops
        // calls to it that are inlined late (through evaluate's lambdas): the built module
        // had no prefetch in its row loops, and rows read in place cost a memory miss each
        // (see the top of this file). An empty asm with the address as input keeps the calls.
        asm volatile("" : : "r"(bytes));
    }

    // Out of line: inlined into the row loops, GCC turned the child pick into a cmov,
    // which chains each level's load on the last (the walk 1.7-2.4x slower on contiguous
    // rows, benchmarks/predictor_latency.py --evaluations).
    __attribute__((noinline)) double walk(const double* row) const {
        double sum = 0.0;
        for (int32_t root : roots_) {
            int32_t node = root;
            while (node >= 0) node = goes_left(nodes_[node], row[nodes_[node].feature]) ? nodes_[node].left
                                                                                          : nodes_[node].right;
            sum += leaf_value_[~node];
        }
        return sum;
    }

    std::vector<Node> nodes_;
    std::vector<double> leaf_value_;
    std::vector<int32_t> roots_;
    int32_t num_features_;
    std::optional<MaskForest> masks_;
};

}  // namespace

void register_forest(py::module_& m) {
    py::class_<AnswerRule>(m, "AnswerRule",
                           "How a model output becomes an answer: offset (log_interval, scaled_interval, odds, "
                           "probability, scaled_probability) then place (after_last, minus_last, as_is).")
        .def(py::init<const std::string&, const std::string&, double>(), py::arg("offset"), py::arg("place"),
             py::arg("boundary"))
        .def("offsets", py::vectorize(&AnswerRule::offset), py::arg("raw"))
        .def("place", py::vectorize(&AnswerRule::place), py::arg("offsets"), py::arg("last_times"));
    py::class_<Forest>(m, "Forest", "A regression forest with LightGBM's numerical split rule.")
        .def(py::init<std::vector<int32_t>, std::vector<double>, std::vector<int32_t>, std::vector<int32_t>,
                      std::vector<uint8_t>, std::vector<uint8_t>, std::vector<double>, std::vector<int32_t>,
                      int32_t, std::string>(),
             py::arg("feature"), py::arg("threshold"), py::arg("left"), py::arg("right"), py::arg("missing"),
             py::arg("default_left"), py::arg("leaf_value"), py::arg("roots"), py::arg("num_features"),
             py::arg("method") = "auto",
             "method: 'masks' (leaf masks, trees of <= 64 leaves), 'walk', or 'auto' (masks when they apply).")
        .def("predict", &Forest::predict, py::arg("rows"), py::arg("index") = py::none(), py::arg("threads") = 1,
             "Sum of the trees' leaf values per row (of rows[index] when index is given).")
        .def("answers", &Forest::answers, py::arg("rows"), py::arg("slots"), py::arg("last_times"), py::arg("rule"),
             py::arg("memo").noconvert() = py::none(), py::arg("threads") = 1,
             "rule's answer per slot from rows[slot] and last_times[slot] (NaN for slot -1); a memo "
             "(offset per slot, NaN = unknown) is read and filled.")
        .def_property_readonly("num_trees", &Forest::num_trees)
        .def_property_readonly("method", &Forest::method, "The evaluation in use: 'masks' or 'walk'.");
    register_model_stream(m);  // the model's feature rows and samples (model_stream.cpp)
}

}  // namespace lcr
