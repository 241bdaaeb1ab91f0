// Megatron-Core's integrity manifest: `integrity.json`, written into a torch_dist checkpoint by
// dist_checkpointing.save(..., verify_integrity=True) (Megatron-Core 0.19) after metadata.json, and
// checked by load(..., verify_integrity=True):
//
//   {"algorithm": "sha256", "files": {"<name>": "<64 hex digits>", …}}
//
// the SHA-256 of every regular file of the directory but integrity.json itself, by plain file name
// (megatron/FORMAT.md, "Integrity manifest"). Read strictly and bounded: at most kMaxIntegrityJson
// bytes, names as a stored relative_path must be (no '/', not "." or "..": nothing outside the
// checkpoint is opened), digests of 64 hex digits, no duplicate names.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/problem.h"
#include "formats/dcp/checkpoint_dir.h"

namespace fpg::dcp {

inline constexpr const char* kIntegrityFile = "integrity.json";
inline constexpr uint64_t kMaxIntegrityJson = uint64_t{64} << 20;

struct IntegrityManifest {
  std::string algorithm;                                   // "sha256"
  std::vector<std::pair<std::string, std::string>> files;  // name, lowercase hex digest; as listed
};

// Nothing when the directory holds no integrity.json. FormatError naming the file and the field for
// one that is not a manifest as above (another algorithm is named in the message).
std::optional<IntegrityManifest> read_integrity_manifest(const CheckpointDir& dir);

struct IntegrityCheck {
  uint64_t files = 0;                  // listed files found (with data: hashed)
  uint64_t bytes = 0;                  // with data: bytes hashed
  std::vector<ckpt::Problem> problems; // missing_file (listed, not a regular file), checksum (digest differs)
  std::vector<std::string> unlisted;   // regular files of the directory the manifest does not list
};

// Each listed file is a regular file of the directory; with `hash`, each is read and its SHA-256
// compared with the listed one (files in parallel on the global thread pool).
IntegrityCheck check_integrity(const CheckpointDir& dir, const IntegrityManifest& m, bool hash);

}  // namespace fpg::dcp
