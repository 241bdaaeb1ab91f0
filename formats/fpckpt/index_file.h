// index.h5, the checkpoint index (man 5 fpgather-format, "INDEX"): root attributes `format`,
// `format_version` [major, minor], `producer`, and (format 2.0 on) `index_checksum`, which covers
// the version, producer, documents and tables; /documents/<name> JSON strings; the string pool
// /names; the tables /files, /keys, /shapes, /runs, /chunks, /padding as packed little-endian HDF5
// compound or integer datasets. 40 bytes per chunk, names stored once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ckpt/index.h"
#include "core/error.h"

namespace fpg::fpckpt {

constexpr const char* kIndexFile = "index.h5";
constexpr const char* kFormatMagic = "fpgather checkpoint";

// The index records a format version this reader does not read (exit 3, problem kind `version`).
struct VersionError : FormatError {
  VersionError(const std::string& what, ckpt::FormatVersion v) : FormatError(what), version(v) {}
  ckpt::FormatVersion version;
};

// An index whose checksum does not match its tables and documents (exit 3 where it is refused).
struct IndexChecksumError : FormatError {
  using FormatError::FormatError;
};

// Writes `index` to `path` (which must not exist) and fsyncs it. index.version is written as given
// (tests write other versions), with an index checksum where that version has one; FormatError on
// failure.
void write_index(const std::string& path, const ckpt::Index& index);

// Reads an index: FormatError naming the path and table if it is not a readable fpgather index,
// VersionError for a newer major version. Chunk::key and Chunk::file are filled from the runs.
// The index checksum is checked and its outcome left in Index::index_checksum: refusing a mismatch is
// the caller's choice (CheckpointReader refuses it unless asked to report it).
ckpt::Index read_index(const std::string& path);

// read_index of the bytes of an index.h5 held in memory (HDF5's core driver; no file is opened);
// `name` stands for the file in messages. For the fuzzer of the index reader (tests/fuzz).
ckpt::Index read_index_image(const std::string& name, const void* data, size_t size);

// Stable on-disk dtype codes (the table in fpgather-format(5)); never reorder.
uint8_t dtype_code(DType t);
bool dtype_from_code(uint8_t code, DType& out);

}  // namespace fpg::fpckpt
