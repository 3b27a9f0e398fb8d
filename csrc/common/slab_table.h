// The SlabHashCache metadata layout shared by the CPU engine and the CUDA kernels.
// The arrays are torch tensors owned by lcr.embedding.cache; engines get raw pointers.
// Semantics (the spec is lcr.embedding.reference): docs/embedding.md.
#pragma once
#include <cstdint>

#include "common/slab_hash.h"

namespace lcr {

constexpr int kSlabSlots = 32;                        // one slab: a warp's width
constexpr int kSlabsetSlots = 2 * kSlabSlots;         // two slabs per slabset
constexpr int kRecordWords = kRecordBits / 64;        // LARU record: 8192 bits
constexpr int kMaxLambdaShift = 7;                    // 64 >> 7 == 0: the window is 1 from here on
constexpr int64_t kEmptyKey = -1;                     // keys are non-negative row ids

// The slab policies, in engine-id order, with their names: the registry
// lcr.embedding.slab_policies.SLAB_POLICIES must agree. Every engine module exports this
// list (slab_policy_ids(), csrc/common/slab_engine_py.h), SlabHashCache refuses a module
// that disagrees, and tests/test_slab_policies.py compares each engine built.
#define LCR_SLAB_POLICIES(X) \
    X(kLru, "lru") X(kFpb, "fpb") X(kHf, "hf") X(kLaru, "laru") X(kLfu, "lfu") X(kFifo, "fifo")

#define LCR_SLAB_POLICY_ID(id, name) id,
enum SlabPolicy : int32_t { LCR_SLAB_POLICIES(LCR_SLAB_POLICY_ID) kSlabPolicyCount };
#undef LCR_SLAB_POLICY_ID

// Non-owning view of one cache's metadata. Slot s of slabset j is index j * 64 + s.
struct SlabTable {
    int64_t* keys;           // [slots] row id, kEmptyKey when free
    uint8_t* tags;           // [slots] tag_of(key), 0 when free: what a probe compares first
    int64_t* stamps;         // [slots] recency stamp; >= the batch's clock means "pinned"
    double* predictions;     // [slots] predicted next-access time, +inf when unknown;
                             // LFU: -(requests), FIFO: -(stamp at insertion)
    uint8_t* old;            // [slots] LARU phase bit: cached at the phase start, not requested since
    int32_t* lambda_shift;   // [slabsets] LARU lambda = 2^-shift
    int32_t* old_count;      // [slabsets] LARU: slots whose phase bit is set
    uint64_t* record;        // [slabsets * 128] LARU: keys evicted by prediction this phase
    uint32_t num_slabsets;
    int32_t policy;          // SlabPolicy
    int32_t hf_window;
};

}  // namespace lcr
