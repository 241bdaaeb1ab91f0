// Reading a checkpoint: open (resolving `latest`), list keys, read any flat range of a key. Each
// chunk's stored bytes are read without an HDF5 filter plugin: HDF5 (under its one mutex) only says
// where a run's chunks lie in the file (H5Dget_chunk_info_by_coord, looked up once per run), and the
// bytes are pread() from the data file with no lock held, so reads run in parallel with each other
// and with HDF5 writes (HDF5 < 1.10.5: H5Dread_chunk under the mutex). Its stored checksum is checked,
// it is decoded in fpgather's threads, its logical checksum checked; memory is one chunk's buffers
// per thread. Both checksums are seeded with the chunk's key and offset where the format binds them
// (ckpt/checksum.h). Declared padding reads as zeros.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/chunk_codec.h"
#include "ckpt/index.h"
#include "ckpt/state_store.h"
#include "core/thread_pool.h"

namespace fpg::fpckpt {

// How stored chunk bytes are fetched: `direct` (pread at the address HDF5 reports; falls back to
// `hdf5` where the library is older than 1.10.5) or `hdf5` (H5Dread_chunk, the reference path).
enum class ChunkReads { direct, hdf5 };

// What opening does with an index that does not match its checksum: `enforce` refuses it
// (IndexChecksumError); `report` opens it and leaves Index::index_checksum saying so, for validation
// to report (validate.h) and for salvage (`--no-validate`).
enum class IndexCheck { enforce, report };

// fpgather's ckpt::StateReader: final, so that this folder's validation, reshard and the benchmarks read
// without virtual dispatch.
class CheckpointReader final : public ckpt::StateReader {
 public:
  // `path` is a checkpoint directory or a root holding `latest`. FormatError (or VersionError,
  // IndexChecksumError) if the index is missing, unreadable or (with `enforce`) altered.
  explicit CheckpointReader(const std::string& path, ChunkReads reads = ChunkReads::direct,
                            IndexCheck check = IndexCheck::enforce);
  // A reader of an index already in memory, whose data files are looked for in `dir` (the fuzzer
  // of the index reader gives it a directory that does not exist). FormatError for a file name that
  // is not a plain name.
  CheckpointReader(std::string dir, ckpt::Index index, ChunkReads reads = ChunkReads::direct);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const std::string& dir() const override { return dir_; }
  const ckpt::Index& index() const override { return index_; }
  // Index of the key named `name`, or -1.
  long find_key(const std::string& name) const override;

  // Reads elements [lo, hi) of `key` into `out` ((hi - lo) elements of the key's dtype). FormatError
  // naming file, key and range on a gap, a checksum mismatch or a read failure.
  void read(uint32_t key, uint64_t lo, uint64_t hi, void* out, ThreadPool* pool = nullptr) const override;

  // Starts reading the stored bytes of the chunks that [lo, hi) of `key` needs into the page cache
  // (posix_fadvise WILLNEED) and returns without waiting for them, so that the disk reads ahead
  // while the caller decodes and writes what it read before. A hint: nothing is checked, errors are
  // left to read(); no-op where chunks are read through HDF5 (ChunkReads::hdf5).
  void prefetch(uint32_t key, uint64_t lo, uint64_t hi) const;

  // Starts reading where the datasets of `runs` (indices into index().runs) are described into the
  // page cache: the first pages of each dataset (its HDF5 object header and chunk index), at the
  // address its file's root group lists for it, and returns without waiting. Opening a dataset and
  // locating its chunks read those pages under the HDF5 mutex, a few small reads at a time; on a
  // cold file, a copy that reads hundreds of runs would wait for the disk that many times in a row,
  // where these requests reach the disk all at once. A hint, as prefetch() is; no-op where chunks
  // are read through HDF5.
  void prefetch_datasets(const std::vector<uint32_t>& runs) const;

  // A ReadAhead (read_ahead.h) along `reads`.
  std::unique_ptr<ckpt::ReadPlan> plan_reads(std::vector<ckpt::KeyRead> reads, uint64_t window) const override;

  // Reads chunk `c`, checks both checksums and decodes it into `logical` (resized). Returns "" or
  // what is wrong; `kind` is set to "checksum" or "read".
  std::string verify_chunk(uint32_t c, ckpt::CodecScratch& scratch, std::vector<uint8_t>& stored,
                           std::vector<uint8_t>& logical) const;

  // The file holding chunk c, for messages: "<dir>/<file>", or "<dir>" where its run names no file.
  std::string chunk_file(uint32_t c) const;

  // The chunks of `key` sorted by offset (indices into index().chunks).
  const std::vector<uint32_t>& chunks_of(uint32_t key) const { return by_key_[key]; }
  // Those of them that hold elements of [lo, hi), as [first, last) of chunks_of(key).
  std::pair<const uint32_t*, const uint32_t*> chunks_in(uint32_t key, uint64_t lo, uint64_t hi) const;

  // What this reader has read from the data files so far, over all threads: chunks and their
  // stored bytes (a load's cost, and the proof that each rank reads only what it needs).
  uint64_t chunks_read() const override { return chunks_read_.load(); }
  uint64_t stored_bytes_read() const override { return bytes_read_.load(); }

  // The path stored bytes take in this reader (direct only where the HDF5 library allows it).
  ChunkReads chunk_reads() const { return reads_; }

 private:
  // Checks the index's file names and builds the per-key, per-run and padding lists.
  void index_read();
  // Raw stored bytes of chunk c; "" or the error.
  std::string read_stored(uint32_t c, std::vector<uint8_t>& stored) const;
  std::string read_stored_hdf5(uint32_t c, std::vector<uint8_t>& stored) const;
  std::string read_stored_direct(uint32_t c, std::vector<uint8_t>& stored) const;
  // Where chunk c's stored bytes lie in its data file and that file's descriptor (locating the
  // chunk's run under the HDF5 mutex the first time); "" or the error.
  std::string locate_stored(uint32_t c, uint64_t& addr, uint64_t& size, int& fd) const;
  // With the HDF5 mutex held: the open HDF5 file `file` (index into index().files; opened once), or
  // the error. Returns a borrowed id.
  std::string file_of(uint32_t file, int64_t& id) const;
  // With the HDF5 mutex held: the open dataset of chunk c's run (opening file and dataset once), or
  // the error. Returns a borrowed id.
  std::string dataset_of(uint32_t c, int64_t& dataset) const;
  // With where_mu_ held: the descriptor stored bytes of data file `file` are read from (opened
  // once), or the error.
  std::string data_fd(uint32_t file, int& fd) const;
  // With the HDF5 mutex held: where every chunk of chunk c's run lies (into where_).
  void locate_run(uint32_t c, int64_t dataset) const;

  std::string dir_;
  ckpt::Index index_;
  std::vector<std::vector<uint32_t>> by_key_;
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> pad_by_key_;  // sorted [lo, hi)
  std::vector<std::vector<uint32_t>> by_run_;  // chunks of each run
  ChunkReads reads_;
  struct Handles;  // open HDF5 files and datasets, guarded by the HDF5 mutex
  std::unique_ptr<Handles> h5_;
  struct Where;  // chunk addresses and the data files' descriptors, guarded by where_mu_
  std::unique_ptr<Where> where_;
  mutable std::mutex where_mu_;
  mutable std::atomic<uint64_t> chunks_read_{0}, bytes_read_{0};
};

}  // namespace fpg::fpckpt
