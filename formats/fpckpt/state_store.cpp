#include "formats/fpckpt/state_store.h"

#include "formats/fpckpt/commit.h"
#include "formats/fpckpt/index_file.h"
#include "formats/fpckpt/reader.h"
#include "formats/fpckpt/recovery.h"
#include "formats/fpckpt/validate.h"

namespace fpg::fpckpt {
namespace {

class Store final : public ckpt::StateStore {
 public:
  std::string_view index_file() const override { return kIndexFile; }
  std::string_view latest_file() const override { return kLatestFile; }
  std::string latest(const std::string& root) const override { return latest_name(root); }
  std::vector<std::string> recover(const std::string& root) const override { return recover_root(root); }

  std::unique_ptr<ckpt::StateSave> begin_save(const std::string& target,
                                              const ckpt::StateWriteOptions& options) const override {
    return std::make_unique<CheckpointWriter>(target, options);
  }
  std::unique_ptr<ckpt::StateWriter> writer(const std::string& staging, uint32_t rank,
                                            const ckpt::StateWriteOptions& options) const override {
    return std::make_unique<RankWriter>(staging, rank, options);
  }
  std::vector<std::string> publish(const std::string& root, const std::string& name, size_t keep) const override {
    update_latest(root, name);
    return apply_retention(root, keep);
  }

  std::unique_ptr<ckpt::StateReader> open(const std::string& path, const std::string& refusing,
                                          bool validate) const override {
    return open_valid(path, refusing, validate);
  }
  std::unique_ptr<ckpt::StateReader> open_as_is(const std::string& path) const override {
    return std::make_unique<CheckpointReader>(path, ChunkReads::direct, IndexCheck::report);
  }
};

}  // namespace

std::unique_ptr<ckpt::StateStore> make_state_store() { return std::make_unique<Store>(); }

}  // namespace fpg::fpckpt
