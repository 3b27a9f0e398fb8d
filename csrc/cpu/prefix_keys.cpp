// Names for a prompt's pages by their whole prefix, in one call.
//
// LARU's serving shadow (lcr.kv.shadow, fed by lcr.integrations.sglang.request_blocks)
// sees each request as pages named by a hash of everything up to and including the
// page, so equal pages under different prefixes stay apart. With SGLang's page size 1
// that is one name per prompt token; in Python each cost a slice, two tuples and a hash
// (about 0.5 µs a token, and the garbage slowed the eviction pass that followed).
// The chain here is SplitMix64's finalizer over (previous name, token), the same in
// every process. Reads Python objects: call with the GIL held.
#include <pybind11/pybind11.h>

#include <cstdint>

#include "cpu/registry.h"

namespace py = pybind11;

namespace lcr {
namespace {

uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// One name per page of `page_size` tokens (the last page may be shorter), root first.
py::list prefix_keys(const py::object& token_ids, int64_t page_size) {
    if (page_size < 1) raise_value_error("page_size must be >= 1");
    py::list out;
    uint64_t name = 0;
    int64_t in_page = 0;
    for (const py::handle token : token_ids) {
        const long long t = PyLong_AsLongLong(token.ptr());
        if (t == -1 && PyErr_Occurred()) throw py::error_already_set();
        name = mix(name + 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(t));
        if (++in_page == page_size) {
            out.append(py::int_(static_cast<int64_t>(name)));
            in_page = 0;
        }
    }
    if (in_page > 0) out.append(py::int_(static_cast<int64_t>(name)));
    return out;
}

}  // namespace

void register_prefix_keys(py::module_& m) {
    m.def("prefix_keys", &prefix_keys, py::arg("token_ids"), py::arg("page_size"),
          "a signed 64-bit name per page of token_ids (the last may be short), each a "
          "hash chain over every token up to the page's end");
}

}  // namespace lcr
