// Hostile variants of a valid checkpoint, for the tests that every reader refuses them cleanly: no
// crash, no hang, nothing read from outside the checkpoint. Each edits a checkpoint in place; the
// HDF5-level ones (links and storage that the fpgather writer never makes) use the HDF5 API directly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fpg::testing {

// What the outside files hold, so that a test can prove none of it was read or printed.
constexpr const char* kOutsideSecret = "OUTSIDE-SECRET";

// Writes the files that hostile variants of `checkpoint` point at into the directory `outside`, each
// a plausible stand-in that a reader following the reference would show: secret.h5 holds /model (the
// checkpoint's model document named kOutsideSecret), /bytes (its /names pool with the first key
// renamed to kOutsideSecret...) and /data (floats); names.bin holds the bytes of /bytes.
void write_outside_files(const std::string& outside, const std::string& checkpoint);

// run-file-out-of-range: runs[0].file is 2^32 - 1.
// external-link-document: /documents/model is an HDF5 external link to secret.h5:/model.
// external-storage-names: /names keeps its bytes in names.bin (HDF5 external raw storage).
// virtual-names: /names is a virtual dataset mapping secret.h5:/bytes.
// The outside files must have been written for this checkpoint.
// rank-file-external-link: dataset /0 of the data file of runs[0] is an external link to secret.h5:/data.
// document-array: /documents/model holds two strings where one is expected.
// huge-table: /chunks declares 2^40 records and stores none.
const std::vector<std::string>& hostile_kinds();

// Where the stored bytes of chunk number `chunk` of dataset /`dataset` lie in the HDF5 file `path`
// (byte offset), for edits that corrupt a chunk in place.
uint64_t stored_chunk_offset(const std::string& path, uint32_t dataset, uint64_t chunk_coord);

// Makes checkpoint `dir` hostile in the way `kind` names; `outside` is the directory of the outside
// files as the checkpoint names it (absolute, or relative to `dir`). std::runtime_error on failure.
void make_hostile(const std::string& kind, const std::string& dir, const std::string& outside);

}  // namespace fpg::testing
