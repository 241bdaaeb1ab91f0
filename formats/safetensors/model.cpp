#include "formats/safetensors/model.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/fs.h"
#include "formats/safetensors/format.h"

namespace fpg::safetensors {
namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool exists(const std::string& path, bool* is_dir = nullptr) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  if (is_dir) *is_dir = S_ISDIR(st.st_mode);
  return true;
}

}  // namespace

Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

const Model::Entry* Model::find(std::string_view name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

const Model::Entry& Model::tensor(std::string_view name) const {
  if (const Entry* e = find(name)) return *e;
  throw FormatError(source_ + ": no tensor " + quote_name(name));
}

const std::map<std::string, std::string>& Model::metadata() const {
  static const std::map<std::string, std::string> kEmpty;
  return shards_.empty() ? kEmpty : shards_.front()->metadata();
}

void Model::add_shard(std::unique_ptr<Reader> r) {
  const size_t s = shards_.size();
  for (const TensorInfo& t : r->tensors()) {
    const auto [it, fresh] = by_name_.emplace(t.name, entries_.size());
    if (!fresh) {
      const Reader& other = *shards_[entries_[it->second].shard];
      throw FormatError(source_ + ": tensor " + quote_name(t.name) + " is present in two shards, " +
                        other.path() + " and " + r->path());
    }
    entries_.push_back({&t, s});
    total_bytes_ += t.nbytes();
  }
  shards_.push_back(std::move(r));
}

Model Model::open_file(const std::string& path) {
  Model m;
  m.path_ = m.source_ = path;
  m.add_shard(std::make_unique<Reader>(path));
  return m;
}

Model Model::open(const std::string& path) {
  Model m;
  m.path_ = path;
  bool is_dir = false;
  if (!exists(path, &is_dir)) throw FormatError(path + ": cannot open: " + std::strerror(errno));
  std::string source = path;
  if (is_dir) {
    const std::string index = fs::join_path(path, kIndexFileName);
    const std::string single = fs::join_path(path, kModelFileName);
    if (exists(index)) source = index;
    else if (exists(single)) source = single;
    else
      throw FormatError(path + ": directory holds neither " + std::string(kIndexFileName) +
                        " nor model.safetensors");
  }
  m.source_ = source;

  if (!ends_with(source, ".json")) {
    m.add_shard(std::make_unique<Reader>(source));
    return m;
  }

  m.index_ = read_index(source);
  const std::string dir = fs::split_path(source).first;
  // One tensor the weight_map places in each shard, to name in messages.
  std::map<std::string, std::string> example;
  for (const auto& [tensor, shard] : m.index_->weight_map) example.emplace(shard, tensor);
  for (const std::string& shard : m.index_->shard_files()) {
    const std::string shard_path = fs::join_path(dir, shard);
    if (!exists(shard_path))
      throw FormatError(source + ": shard " + quote_name(shard) + " (holding tensor " +
                        quote_name(example[shard]) + ") does not exist: " + shard_path);
    m.add_shard(std::make_unique<Reader>(shard_path));
  }
  const auto files = m.index_->shard_files();
  for (const auto& [tensor, shard] : m.index_->weight_map) {
    const Entry* e = m.find(tensor);
    if (!e)
      throw FormatError(source + ": tensor " + quote_name(tensor) + " is mapped to shard " +
                        quote_name(shard) + ", which does not hold it");
    const std::string& actual = files[e->shard];
    if (actual != shard)
      throw FormatError(source + ": tensor " + quote_name(tensor) + " is mapped to shard " +
                        quote_name(shard) + " but is stored in shard " + quote_name(actual));
  }
  for (const Entry& e : m.entries_) {
    if (!m.index_->weight_map.count(e.info->name))
      throw FormatError(source + ": tensor " + quote_name(e.info->name) + " of shard " +
                        quote_name(files[e.shard]) + " is missing from the weight_map");
  }
  return m;
}

}  // namespace fpg::safetensors
