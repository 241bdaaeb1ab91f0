// The `threads` backend: N ranks as N threads of one process sharing memory (the default).
// Host memory only.
//
// How a collective runs: each rank posts a description of its call, all meet at an (abortable)
// rendezvous, every rank checks that all calls match (UsageError on every rank otherwise), then each
// rank does its own share of the work reading the other ranks' buffers directly — no staging copies —
// and all meet again before returning, so no rank reuses a buffer another still reads.
//  - all_gather(_v), broadcast: each rank copies the other ranks' parts into its own buffer.
//  - reduce_scatter: each rank reduces its own shard from every rank's input.
//  - all_reduce: the range is cut into N chunks (64-byte aligned); rank r reduces chunk r from every
//    input and writes the result into every rank's output, so the work is spread over all ranks.
// Reductions are deterministic (comm/host_reduce.h): rank order ((x0 + x1) + x2) + … in fp32,
// bitwise identical on every rank and to the serial sum in rank order, whatever N and chunking.
// Completion is immediate or deferred (CommOptions in comm/group.h).
#pragma once

#include <memory>

#include "comm/group.h"

namespace fpg::comm {

// Most ranks a threads group may have (each is a thread).
constexpr int kMaxThreadsRanks = 4096;

// The threads group of `size` ranks; size in [1, kMaxThreadsRanks], else UsageError. run() runs rank 0
// on the calling thread and the others on new threads.
std::unique_ptr<CommunicatorGroup> make_threads_group(int size, const CommOptions& options = {});

}  // namespace fpg::comm
