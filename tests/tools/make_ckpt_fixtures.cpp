// Writes testdata/ckpt: valid checkpoints through the C++ API, and deliberately broken ones (each a
// valid checkpoint with one defect) whose expected `fpgather validate` diagnostics tests/cli/validate.sh
// checks, the hostile ones among them pointing at files in outside/ (tests/tools/hostile_ckpt.h).
// Run by testdata/ckpt/make_fixtures.sh; rerunnable (everything but the golden checkpoint is
// rewritten). The golden checkpoint golden-v<major>.<minor> is written only if absent: it is kept
// forever so that future readers prove they still read this version.
//   fpgather_make_ckpt_fixtures TESTDATA/ckpt
//   fpgather_make_ckpt_fixtures --hostile KIND CHECKPOINT OUTSIDE_DIR   (one hostile edit, for tests)
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "ckpt/version.h"
#include "core/error.h"
#include "core/fs.h"
#include "formats/fpckpt/commit.h"
#include "formats/fpckpt/index_file.h"
#include "formats/fpckpt/reader.h"
#include "tools/ckpt_fixture.h"
#include "tools/hostile_ckpt.h"

using namespace fpg;

namespace {

bool exists(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0;
}

testing::FixtureOptions base() {
  testing::FixtureOptions o;
  o.dp = 8;
  o.state_layout = ckpt::StateLayout::bucket;
  o.write.compression = ckpt::parse_compression("zstd:1+shuffle");
  o.write.chunk_bytes = 128;  // many small chunks: runs of several chunks, edge chunks
  return o;
}

void fresh(const std::string& dir) { fs::remove_tree(dir); }

// Rewrites a checkpoint's index after `edit` changed it.
template <class F>
void edit_index(const std::string& dir, F edit) {
  const std::string path = dir + "/" + fpckpt::kIndexFile;
  ckpt::Index ix = fpckpt::read_index(path);
  edit(ix);
  unlink(path.c_str());
  fpckpt::write_index(path, ix);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void spit(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

long key_of(const ckpt::Index& ix, const std::string& name) {
  const long k = ix.find_key(name);
  if (k < 0) throw InternalError("fixture has no key " + name);
  return k;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--hostile") {
    try {
      const std::string dir = fpckpt::resolve_checkpoint(argv[3]);
      testing::write_outside_files(argv[4], dir);
      testing::make_hostile(argv[2], dir, argv[4]);
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "make_ckpt_fixtures: %s\n", e.what());
      return 1;
    }
  }
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s TESTDATA/ckpt\n       %s --hostile KIND CHECKPOINT OUTSIDE_DIR\n", argv[0], argv[0]);
    return 2;
  }
  const std::string root = argv[1];
  try {
    const std::string golden = root + "/golden-v" + ckpt::to_string(ckpt::kFormatVersion);
    if (!exists(golden)) testing::write_fixture(golden, base());

    // Valid checkpoints of the same state in other DP layouts and encodings (diff, inspect, interop).
    mkdir((root + "/valid").c_str(), 0755);
    struct V {
      const char* name;
      uint32_t dp;
      ckpt::StateLayout sl;
      const char* comp;
      bool perturb;
    };
    for (const V& v : {V{"dp2-model", 2, ckpt::StateLayout::model, "none", false},
                       V{"dp4-model", 4, ckpt::StateLayout::model, "zstd:3", false},
                       V{"dp4-model-perturbed", 4, ckpt::StateLayout::model, "zstd:1", true},
                       V{"dp2-bucket", 2, ckpt::StateLayout::bucket, "zstd:1", false}}) {
      const std::string dir = root + "/valid/" + v.name;
      fresh(dir);
      auto o = base();
      o.dp = v.dp;
      o.state_layout = v.sl;
      o.write.compression = ckpt::parse_compression(v.comp);
      o.write.chunk_bytes = 256;
      o.perturb = v.perturb;
      testing::write_fixture(dir, o);
    }
    // A checkpoint root: two steps and `latest` naming the second.
    {
      const std::string dir = root + "/valid/run";
      fresh(dir);
      mkdir(dir.c_str(), 0755);
      testing::write_fixture(dir + "/step-00000006", base());
      testing::write_fixture(dir + "/step-00000007", base());
      fpckpt::update_latest(dir, "step-00000007");
    }

    // Broken checkpoints: each the base with one defect.
    const std::string b = root + "/broken";
    mkdir(b.c_str(), 0755);
    auto make = [&](const std::string& name, testing::FixtureOptions o) {
      fresh(b + "/" + name);
      testing::write_fixture(b + "/" + name, o);
      return b + "/" + name;
    };
    const std::string exp_avg = ckpt::bucket_state_key(0, 0, "exp_avg");
    {  // gap: the index loses one chunk of exp_avg
      const auto dir = make("gap", base());
      edit_index(dir, [&](ckpt::Index& ix) {
        const long k = key_of(ix, exp_avg);
        for (size_t c = 0; c < ix.chunks.size(); ++c)
          if (ix.chunks[c].key == static_cast<uint32_t>(k) && ix.chunks[c].offset == 128) {
            ix.chunks.erase(ix.chunks.begin() + static_cast<long>(c));
            break;
          }
      });
    }
    {  // overlap: rank 5 also writes the first 16 elements of each weight
      auto o = base();
      o.overlap_rank = 5;
      make("overlap", o);
    }
    {  // padding past the extent: the bucket's tail padding declared in the key
      const auto dir = make("padding-past-extent", base());
      edit_index(dir, [&](ckpt::Index& ix) {
        const long k = key_of(ix, exp_avg);
        ix.padding.push_back({static_cast<uint32_t>(k), 228, 256});
      });
    }
    {  // a padding-only rank's range missing: rank 3 owns only the gap [96, 128) and does not declare it
      auto o = base();
      o.skip_padding_rank = 3;
      make("padding-only-rank-missing", o);
    }
    {  // mixed dtype: one run of exp_avg recorded as BF16
      const auto dir = make("mixed-dtype", base());
      edit_index(dir, [&](ckpt::Index& ix) {
        const long k = key_of(ix, exp_avg);
        for (auto& r : ix.runs)
          if (r.key == static_cast<uint32_t>(k) && r.lo == 128) {
            r.dtype = DType::BF16;
            break;
          }
      });
    }
    {  // a flipped bit inside one stored chunk of exp_avg_sq
      const auto dir = make("flipped-bit", base());
      fpckpt::CheckpointReader r(dir);
      const ckpt::Index& ix = r.index();
      const long k = key_of(ix, ckpt::bucket_state_key(0, 0, "exp_avg_sq"));
      const ckpt::Chunk& ch = ix.chunks.at(r.chunks_of(static_cast<uint32_t>(k)).at(2));
      const ckpt::Run& run = ix.runs.at(ch.run);
      const std::string file = dir + "/" + ix.files.at(run.file).name;
      const uint64_t at = testing::stored_chunk_offset(file, run.dataset, ch.offset - run.lo);
      std::string bytes = slurp(file);
      if (at + ch.stored_bytes > bytes.size()) throw InternalError("fixture chunk outside its file");
      bytes[at + ch.stored_bytes / 2] ^= 0x10;
      spit(file, bytes);
    }
    {  // a truncated file
      const auto dir = make("truncated-file", base());
      const std::string file = dir + "/" + fpckpt::rank_file_name(1);
      const std::string bytes = slurp(file);
      spit(file, bytes.substr(0, bytes.size() / 2));
    }
    {  // a missing file
      const auto dir = make("missing-file", base());
      unlink((dir + "/" + fpckpt::rank_file_name(2)).c_str());
    }
    {  // a data chunk of exp_avg turned into declared padding: the coverage holds, the layout does not
      const auto dir = make("chunk-as-padding", base());
      edit_index(dir, [&](ckpt::Index& ix) {
        const long k = key_of(ix, exp_avg);
        for (size_t c = 0; c < ix.chunks.size(); ++c)
          if (ix.chunks[c].key == static_cast<uint32_t>(k) && ix.chunks[c].offset == 128) {
            ix.padding.push_back({static_cast<uint32_t>(k), ix.chunks[c].offset, ix.chunks[c].hi()});
            ix.chunks.erase(ix.chunks.begin() + static_cast<long>(c));
            break;
          }
      });
    }
    {  // padding declared over data: exp_avg's [160, 170) is both
      const auto dir = make("padding-over-data", base());
      edit_index(dir, [&](ckpt::Index& ix) { ix.padding.push_back({static_cast<uint32_t>(key_of(ix, exp_avg)), 160, 170}); });
    }
    {  // a chunk record of exp_avg listed twice
      const auto dir = make("duplicated-chunk", base());
      edit_index(dir, [&](ckpt::Index& ix) {
        const long k = key_of(ix, exp_avg);
        for (size_t c = 0; c < ix.chunks.size(); ++c)
          if (ix.chunks[c].key == static_cast<uint32_t>(k) && ix.chunks[c].offset == 128) {
            ix.chunks.insert(ix.chunks.begin() + static_cast<long>(c), ix.chunks[c]);
            break;
          }
      });
    }
    {  // the names of exp_avg and exp_avg_sq swapped in a resealed index: only the chunk checksums,
       // bound to their key, notice (validate --data)
      const auto dir = make("swapped-keys", base());
      edit_index(dir, [&](ckpt::Index& ix) {
        std::swap(ix.keys[key_of(ix, exp_avg)].name, ix.keys[key_of(ix, ckpt::bucket_state_key(0, 0, "exp_avg_sq"))].name);
      });
    }
    {  // moved chunks: weight/x written as [0, 32) by rank 0 and [32, 64) by rank 1, then the two
       // runs' places swapped in a resealed index; only the chunk checksums, bound to their offset,
       // notice (validate --data). No layout: the layout check would see the ranks' ranges.
      const std::string dir = b + "/moved-chunk";
      fresh(dir);
      {
        auto o = base().write;
        o.chunk_bytes = 64;
        fpckpt::CheckpointWriter w(dir, o);
        std::vector<float> v(64);
        for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
        for (uint32_t r = 0; r < 2; ++r) {
          const uint32_t k = w.rank(r).declare({"weight/x", DType::F32, {64}, ckpt::KeyKind::weight});
          w.rank(r).write(k, 32 * r, v.data() + 32 * r, 32);
        }
        w.commit();
      }
      edit_index(dir, [&](ckpt::Index& ix) {
        for (auto& r : ix.runs) r.lo = 32 - r.lo;
        for (auto& c : ix.chunks) c.offset = c.offset < 32 ? c.offset + 32 : c.offset - 32;
      });
    }
    {  // an edited document, the index not resealed: the index checksum notices on every open
      const auto dir = make("edited-document", base());
      const std::string path = dir + "/" + fpckpt::kIndexFile;
      std::string bytes = slurp(path);
      const std::string was = "\"cursor\": 1792", now = "\"cursor\": 1793";
      const size_t at = bytes.find(was);
      if (at == std::string::npos || bytes.find(was, at + 1) != std::string::npos)
        throw InternalError("fixture data document not found exactly once");
      bytes.replace(at, was.size(), now);
      spit(path, bytes);
    }
    {  // a newer format version
      const auto dir = make("newer-version", base());
      edit_index(dir, [&](ckpt::Index& ix) { ix.version = {ckpt::kFormatVersion.major + 1, 0}; });
    }
    // Hostile checkpoints: each the base with one crafted reference; outside/ holds what they point at.
    mkdir((root + "/outside").c_str(), 0755);
    auto small = base();
    small.dp = 2;  // two data files: the crafted references need no more
    for (const std::string& kind : testing::hostile_kinds()) {
      const std::string dir = make(kind, small);
      if (kind == testing::hostile_kinds().front()) testing::write_outside_files(root + "/outside", dir);
      testing::make_hostile(kind, dir, "../../outside");
    }
    std::printf("checkpoint fixtures written under %s\n", root.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_ckpt_fixtures: %s\n", e.what());
    return 1;
  }
}
