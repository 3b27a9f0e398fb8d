// How the next-access model's raw output becomes the answer a cache ranks by
// (lcr.predict.lightgbm_model explains the objectives and ranks). The one place the rule
// lives: the numpy-facing calls and the forest's fused batch answer both use it.
#pragma once
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace lcr {

struct AnswerRule {
    // The model's term: a predicted interval, or the belady class probability mapped.
    enum class Offset { kLogInterval, kScaledInterval, kOdds, kProbability, kScaledProbability };
    // How the term meets the key's latest access time.
    enum class Place { kAfterLast, kMinusLast, kAsIs };

    Offset offset_kind;
    Place place_kind;
    double boundary;

    AnswerRule(const std::string& offset, const std::string& place, double boundary_) : boundary(boundary_) {
        if (offset == "log_interval") offset_kind = Offset::kLogInterval;
        else if (offset == "scaled_interval") offset_kind = Offset::kScaledInterval;
        else if (offset == "odds") offset_kind = Offset::kOdds;
        else if (offset == "probability") offset_kind = Offset::kProbability;
        else if (offset == "scaled_probability") offset_kind = Offset::kScaledProbability;
        else throw std::invalid_argument("answer rule: unknown offset " + offset);
        if (place == "after_last") place_kind = Place::kAfterLast;
        else if (place == "minus_last") place_kind = Place::kMinusLast;
        else if (place == "as_is") place_kind = Place::kAsIs;
        else throw std::invalid_argument("answer rule: unknown place " + place);
    }

    double offset(double raw) const {
        switch (offset_kind) {
            case Offset::kLogInterval: return std::expm1(std::max(raw, 0.0));  // the model fits log1p
            case Offset::kScaledInterval: return boundary * std::max(raw, 0.0);
            case Offset::kOdds: {  // p = 1/2 is "back after one boundary"
                const double p = probability(raw);
                return boundary * p / std::max(1.0 - p, 1e-12);
            }
            case Offset::kProbability: return probability(raw);
            case Offset::kScaledProbability: return boundary * probability(raw);
        }
        return raw;
    }

    double place(double offset, double last_time) const {
        switch (place_kind) {
            case Place::kAfterLast: return last_time + offset;
            case Place::kMinusLast: return offset - last_time;
            case Place::kAsIs: return offset;
        }
        return offset;
    }

    // P(next access beyond the boundary) from the binary model's log-odds.
    static double probability(double raw) { return 1.0 / (1.0 + std::exp(-raw)); }
};

}  // namespace lcr
