// DCP checkpoints written by formats/dcp's writer, for the interop test (tests/interop/test_dcp_write.py)
// to load with torch:
//
//   make_dcp synth OUT [--megatron] [--block-bytes N] [--carry FILE OFFSET LENGTH]
//       Tensors of several dtypes and shapes (a scalar, an empty one, row-, column- and grid-split
//       ones) as chunks on ranks 0-2, and bytes items holding plain Python values (below). Byte i of
//       the row-major global tensor number k is (k*131 + i*17 + (i>>8)) & 0xFF. --carry adds the
//       bytes item "carried" on rank 0: LENGTH bytes of FILE from OFFSET, unchanged.
//   make_dcp copy SRC OUT [--objects] [--drop PREFIX]... [--replace KEY FILE]...
//       SRC rewritten through the writer: the same keys in the same order, each chunk on the rank its
//       file is named after (__R_*), tensors decoded and written again, bytes items copied (with
//       --objects: decoded and pickled again). metadata.json is kept when SRC has one. --drop leaves
//       out every key starting with PREFIX (a checkpoint with a part missing, for the refusal tests);
//       --replace stores FILE's bytes (a torch.save archive) as the bytes item KEY.
//   make_dcp big OUT BYTES
//       One uint8 tensor "big" of BYTES elements (byte i = i*17 + (i>>8)), to exercise ZIP64.
//   make_dcp tensors OUT [--item-length KEY N] NAME=SHAPE...
//       A plain DCP checkpoint of float32 tensors NAME (any bytes, as a hostile file may name a key)
//       of SHAPE ("64", "4x8", "" for a scalar), each one chunk on rank 0, element i = i. With
//       --item-length, the storage entry of KEY's chunk then records N bytes (its item unchanged):
//       a .metadata no writer makes, for the validation tests.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/dcp/dcp_writer.h"
#include "formats/dcp/metadata/metadata_writer.h"
#include "formats/dcp/reader.h"

using namespace fpg::dcp;

namespace {

const TorchDType& dt(const char* name) {
  const TorchDType* d = find_torch_dtype(name);
  if (!d) throw fpg::InternalError(std::string("no torch dtype ") + name);
  return *d;
}

uint8_t pattern(uint64_t seed, uint64_t i) { return static_cast<uint8_t>(seed * 131 + i * 17 + (i >> 8)); }

// The bytes of the chunk box [offsets, offsets + sizes) of the global tensor `seed`, row-major.
FillBytes chunk_fill(uint64_t seed, std::vector<uint64_t> shape, std::vector<uint64_t> offsets,
                     std::vector<uint64_t> sizes, uint64_t element_bytes) {
  return [=](uint64_t off, void* dst, size_t n) {
    auto* out = static_cast<uint8_t*>(dst);
    for (size_t b = 0; b < n; ++b) {
      uint64_t e = (off + b) / element_bytes, global = 0;
      std::vector<uint64_t> idx(sizes.size());
      for (size_t d = sizes.size(); d-- > 0;) {
        idx[d] = e % sizes[d];
        e /= sizes[d];
      }
      for (size_t d = 0; d < sizes.size(); ++d) global = global * shape[d] + offsets[d] + idx[d];
      out[b] = pattern(seed, global * element_bytes + (off + b) % element_bytes);
    }
  };
}

Value str(const char* s) { return Value::str(s); }
Value tuple(std::vector<Value> v) { return Value::sequence(Value::Kind::tuple, std::move(v)); }
Value list(std::vector<Value> v) { return Value::sequence(Value::Kind::list, std::move(v)); }
Value i(int64_t v) { return Value::integer(v); }
Value f(double v) { return Value::floating(v); }

Value param_groups() {
  auto group = [](double lr) {
    return Value::dict({{str("lr"), f(lr)},
                        {str("betas"), tuple({f(0.9), f(0.95)})},
                        {str("eps"), f(1e-08)},
                        {str("amsgrad"), Value::boolean(false)},
                        {str("maximize"), Value::boolean(true)},
                        {str("foreach"), Value()},
                        {str("step"), f(3.0)},
                        {str("params"), list({i(0), i(1), i(2)})}});
  };
  Value extra = Value::dict({
      {str("ints"), list({i(0), i(255), i(256), i(65535), i(65536), i(-1), i(-2147483648LL), i(2147483647),
                          i(2147483648LL), i(-2147483649LL), i(INT64_MAX), i(INT64_MIN)})},
      {str("floats"), list({f(-0.0), f(1e300), f(-2.5e-310)})},
      {str("name"), str("h\xc3\xa9llo \xe2\x86\x92 \xc3\xbc")},
      {str("blob"), Value::bytes(std::string("\x00\xff\x80" "ab", 5))},
      {str("empty_bytes"), Value::bytes("")},
      {str("t0"), tuple({})},
      {str("t4"), tuple({i(1), i(2), i(3), i(4)})},
      {str("nested"), Value::dict({{str("a"), list({})}, {str("b"), Value::dict({})}})},
      {i(7), str("int key")},
  });
  return list({group(0.001), group(-0.0), extra});
}

Value per_bucket_numel() {
  const Value bf16 = Value::global("torch.bfloat16"), f32 = Value::global("torch.float32");
  return list({Value::dict({{tuple({bf16, f32}), list({i(24576), i(100)})}}),
               Value::dict({{tuple({f32, f32}), list({i(384)})}})});
}

Value long_list() {
  std::vector<Value> v;
  for (int k = 0; k < 2500; ++k) v.push_back(i(k));
  return list(std::move(v));
}

Value long_dict() {
  std::vector<std::pair<Value, Value>> e;
  for (int k = 0; k < 1001; ++k) e.emplace_back(Value::str(std::to_string(k)), i(k));
  return Value::dict(std::move(e));
}

struct Chunk {
  uint32_t rank;
  std::vector<uint64_t> offsets, sizes;
};
struct Tensor {
  const char* fqn;
  const char* dtype;
  std::vector<uint64_t> shape;
  std::vector<Chunk> chunks;
};

int synth(const std::string& out, int argc, char** argv) {
  DcpWriteOptions o;
  const char* carry_file = nullptr;
  uint64_t carry_offset = 0, carry_length = 0;
  for (int a = 0; a < argc; ++a) {
    if (!std::strcmp(argv[a], "--megatron")) {
      o.megatron = megatron_torch_dist_metadata();
      o.planner_data = false;
    } else if (!std::strcmp(argv[a], "--block-bytes") && a + 1 < argc) {
      o.io_block_bytes = std::strtoull(argv[++a], nullptr, 10);
    } else if (!std::strcmp(argv[a], "--carry") && a + 3 < argc) {
      carry_file = argv[++a];
      carry_offset = std::strtoull(argv[++a], nullptr, 10);
      carry_length = std::strtoull(argv[++a], nullptr, 10);
    } else {
      throw fpg::UsageError(std::string("make_dcp synth: unknown argument ") + argv[a]);
    }
  }
  const std::vector<Tensor> tensors = {
      {"model.embedding.weight", "bfloat16", {10, 8}, {{0, {0, 0}, {5, 8}}, {1, {5, 0}, {5, 8}}}},
      {"model.norm", "float32", {8}, {{0, {0}, {8}}}},
      {"optim.exp_avg", "float32", {6, 9}, {{0, {0, 0}, {3, 5}}, {1, {0, 5}, {3, 4}}, {2, {3, 0}, {3, 9}}}},
      {"scalar.step", "float64", {}, {{2, {}, {}}}},
      {"empty", "float32", {0, 4}, {{1, {0, 0}, {0, 4}}}},
      {"fp8.weight", "float8_e4m3fn", {4, 4}, {{0, {0, 0}, {2, 4}}, {2, {2, 0}, {2, 4}}}},
      {"u16", "uint16", {3}, {{1, {0}, {3}}}},
      {"i64", "int64", {5}, {{0, {0}, {5}}}},
      {"big", "uint8", {70000}, {{0, {0}, {30000}}, {1, {30000}, {30000}}, {2, {60000}, {10000}}}},
  };
  const std::vector<std::pair<uint32_t, std::pair<const char*, Value>>> objects = {
      {0, {"param_groups", param_groups()}},
      {1, {"per_bucket_numel", per_bucket_numel()}},
      {2, {"long_list", long_list()}},
      {2, {"long_dict", long_dict()}},
      {0, {"set", Value::sequence(Value::Kind::set, {i(1), i(2), i(3)})}},
  };
  DcpWriter w(out, o);
  for (const Tensor& t : tensors) w.declare_tensor(t.fqn, dt(t.dtype), t.shape);
  for (const auto& [rank, kv] : objects) w.declare_bytes(kv.first);
  if (carry_file) w.declare_bytes("carried");
  for (uint32_t r = 0; r < 3; ++r) {
    for (size_t k = 0; k < tensors.size(); ++k)
      for (const Chunk& c : tensors[k].chunks)
        if (c.rank == r)
          w.rank(r).write_tensor(tensors[k].fqn, c.offsets, c.sizes,
                                 chunk_fill(k, tensors[k].shape, c.offsets, c.sizes, dt(tensors[k].dtype).element_bytes));
    for (const auto& [rank, kv] : objects)
      if (rank == r) w.rank(r).write_object(kv.first, kv.second);
    if (r == 0 && carry_file) {
      std::ifstream in(carry_file, std::ios::binary);
      w.rank(0).write_bytes("carried", carry_length, [&](uint64_t off, void* dst, size_t n) {
        in.seekg(static_cast<std::streamoff>(carry_offset + off));
        if (!in.read(static_cast<char*>(dst), static_cast<std::streamsize>(n)))
          throw fpg::FormatError(std::string(carry_file) + ": short read");
      });
    }
  }
  w.commit();
  return 0;
}

int copy(const std::string& src, const std::string& out, bool objects, const std::vector<std::string>& drop,
         const std::map<std::string, std::string>& replace) {
  const Reader r(src);
  const Metadata& m = r.metadata();
  DcpWriteOptions o;
  o.megatron = r.megatron();
  o.planner_data = !m.planner_data.empty();
  DcpWriter w(out, o);
  // storage index -> (entry, chunk); chunk is -1 for a bytes entry
  std::map<int64_t, std::pair<const Entry*, int64_t>> by_storage;
  for (const Entry& e : m.entries) {
    bool dropped = false;
    for (const std::string& d : drop) dropped = dropped || e.fqn.rfind(d, 0) == 0;
    if (dropped) continue;
    if (e.is_tensor) {
      w.declare_tensor(e.fqn, *e.tensor.dtype, e.tensor.size);
      for (size_t c = 0; c < e.tensor.chunks.size(); ++c) by_storage[e.tensor.chunks[c].storage] = {&e, c};
    } else {
      w.declare_bytes(e.fqn);
      by_storage[e.storage] = {&e, -1};
    }
  }
  for (const auto& [storage, where] : by_storage) {
    const auto& [e, chunk] = where;
    const std::string& file = m.storage[static_cast<size_t>(storage)].relative_path;
    const uint32_t rank = file.rfind("__", 0) == 0 ? static_cast<uint32_t>(std::strtoul(file.c_str() + 2, nullptr, 10)) : 0;
    if (chunk >= 0) {
      const ChunkMeta& c = e->tensor.chunks[static_cast<size_t>(chunk)];
      std::vector<uint8_t> data(r.chunk_bytes(*e, static_cast<size_t>(chunk)));
      r.read_chunk(*e, static_cast<size_t>(chunk), data.data(), data.size());
      w.rank(rank).write_tensor(e->fqn, c.offsets, c.sizes,
                                [&](uint64_t off, void* dst, size_t n) { std::memcpy(dst, data.data() + off, n); });
    } else if (auto it = replace.find(e->fqn); it != replace.end()) {
      std::ifstream in(it->second, std::ios::binary);
      if (!in) throw fpg::UsageError("make_dcp copy: cannot read " + it->second);
      const std::vector<uint8_t> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      w.rank(rank).write_bytes(e->fqn, raw.size(),
                               [&](uint64_t off, void* dst, size_t n) { std::memcpy(dst, raw.data() + off, n); });
    } else if (objects) {
      w.rank(rank).write_object(e->fqn, r.read_object(*e));
    } else {
      const std::vector<uint8_t> raw = r.read_bytes(*e);
      w.rank(rank).write_bytes(e->fqn, raw.size(),
                               [&](uint64_t off, void* dst, size_t n) { std::memcpy(dst, raw.data() + off, n); });
    }
  }
  w.commit();
  return 0;
}

int big(const std::string& out, uint64_t bytes) {
  DcpWriter w(out);
  w.declare_tensor("big", dt("uint8"), {bytes});
  w.rank(0).write_tensor("big", {0}, {bytes}, [](uint64_t off, void* dst, size_t n) {
    auto* p = static_cast<uint8_t*>(dst);
    for (size_t b = 0; b < n; ++b) p[b] = pattern(0, off + b);
  });
  w.commit();
  return 0;
}

std::vector<uint64_t> parse_shape(const std::string& text) {
  std::vector<uint64_t> shape;
  size_t at = 0;
  while (at < text.size()) {
    const size_t x = text.find('x', at);
    shape.push_back(std::strtoull(text.substr(at, x == std::string::npos ? std::string::npos : x - at).c_str(), nullptr, 10));
    if (x == std::string::npos) break;
    at = x + 1;
  }
  return shape;
}

int tensors(const std::string& out, int argc, char** argv) {
  std::vector<std::pair<std::string, std::vector<uint64_t>>> specs;
  std::string length_key;
  uint64_t length = 0;
  bool set_length = false;
  for (int a = 0; a < argc; ++a) {
    const std::string arg = argv[a];
    if (arg == "--item-length" && a + 2 < argc) {
      length_key = argv[++a];
      length = std::strtoull(argv[++a], nullptr, 10);
      set_length = true;
      continue;
    }
    const size_t eq = arg.rfind('=');
    if (eq == std::string::npos) throw fpg::UsageError("make_dcp tensors: expected NAME=SHAPE, got " + arg);
    specs.emplace_back(arg.substr(0, eq), parse_shape(arg.substr(eq + 1)));
  }
  {
    DcpWriter w(out);
    for (const auto& [name, shape] : specs) w.declare_tensor(name, dt("float32"), shape);
    for (const auto& [name, shape] : specs) {
      const std::vector<uint64_t> offsets(shape.size(), 0);
      w.rank(0).write_tensor(name, offsets, shape, [](uint64_t off, void* dst, size_t n) {
        for (size_t b = 0; b < n; b += 4) {
          const float v = static_cast<float>((off + b) / 4);
          std::memcpy(static_cast<uint8_t*>(dst) + b, &v, 4);
        }
      });
    }
    w.commit();
  }
  if (!set_length) return 0;
  const std::string path = out + "/.metadata";
  Metadata m;
  {
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    m = parse_metadata(path, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  bool found = false;
  for (StorageEntry& e : m.storage)
    if (e.fqn == length_key) {
      e.length = length;
      found = true;
    }
  if (!found) throw fpg::UsageError("make_dcp tensors: no storage entry of key " + length_key);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << metadata_pickle(m);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 2 ? argv[1] : "";
    if (mode == "synth") return synth(argv[2], argc - 3, argv + 3);
    if (mode == "copy" && argc >= 4) {
      bool objects = false;
      std::vector<std::string> drop;
      std::map<std::string, std::string> replace;
      for (int a = 4; a < argc; ++a) {
        if (!std::strcmp(argv[a], "--objects")) objects = true;
        else if (!std::strcmp(argv[a], "--drop") && a + 1 < argc) drop.push_back(argv[++a]);
        else if (!std::strcmp(argv[a], "--replace") && a + 2 < argc) {
          replace[argv[a + 1]] = argv[a + 2];
          a += 2;
        }
        else throw fpg::UsageError(std::string("make_dcp copy: unknown argument ") + argv[a]);
      }
      return copy(argv[2], argv[3], objects, drop, replace);
    }
    if (mode == "big" && argc == 4) return big(argv[2], std::strtoull(argv[3], nullptr, 10));
    if (mode == "tensors") return tensors(argv[2], argc - 3, argv + 3);
    std::fprintf(stderr, "usage: make_dcp synth OUT [--megatron] [--block-bytes N] [--carry FILE OFFSET LENGTH]\n"
                         "       make_dcp copy SRC OUT [--objects] [--drop PREFIX]... [--replace KEY FILE]...\n       make_dcp big OUT BYTES\n"
                         "       make_dcp tensors OUT [--item-length KEY N] NAME=SHAPE...\n");
    return 2;
  } catch (const fpg::Error& e) {
    std::fprintf(stderr, "make_dcp: %s\n", e.what());
    return static_cast<int>(e.code());
  }
}
