#include "core/printable.h"
#include "core/fs.h"
#include "formats/fpckpt/index_file.h"

#include <cstring>
#include <unordered_map>

#include "ckpt/checksum.h"
#include "formats/fpckpt/hdf5_util.h"

namespace fpg::fpckpt {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the index tables are read in place as little-endian");

// On-disk records, packed: the memory type equals the file type, so HDF5 copies without converting.
#pragma pack(push, 1)
struct FileRec {
  uint64_t name_off;
  uint32_t name_len;
  uint32_t rank;
  uint64_t size;
};
struct KeyRec {
  uint64_t name_off;
  uint32_t name_len;
  uint32_t shape_off;  // into /shapes
  uint32_t ndim;
  uint8_t dtype;
  uint8_t kind;
};
struct RunRec {
  uint32_t file;
  uint32_t dataset;
  uint32_t key;
  uint32_t chunk_elems;
  uint64_t lo;
  uint64_t numel;
  uint8_t dtype;
  uint8_t filters;
};
struct ChunkRec {
  uint32_t run;
  uint32_t length;
  uint64_t offset;
  uint32_t stored_bytes;
  uint32_t flags;
  uint64_t checksum_stored;
  uint64_t checksum_logical;
};
struct PadRec {
  uint32_t key;
  uint64_t lo;
  uint64_t hi;
};
#pragma pack(pop)
static_assert(sizeof(ChunkRec) == 40, "chunk record size is part of the format");

#define FIELD(T, f, h5) {#f, offsetof(T, f), h5}
struct Field {
  const char* name;
  size_t offset;
  hid_t type;
};

Hid compound(size_t size, std::initializer_list<Field> fields) {
  Hid t(H5Tcreate(H5T_COMPOUND, size), H5Tclose);
  for (const Field& f : fields) H5Tinsert(t, f.name, f.offset, f.type);
  return t;
}

Hid file_type() {
  return compound(sizeof(FileRec), {FIELD(FileRec, name_off, H5T_STD_U64LE), FIELD(FileRec, name_len, H5T_STD_U32LE),
                                    FIELD(FileRec, rank, H5T_STD_U32LE), FIELD(FileRec, size, H5T_STD_U64LE)});
}
Hid key_type() {
  return compound(sizeof(KeyRec), {FIELD(KeyRec, name_off, H5T_STD_U64LE), FIELD(KeyRec, name_len, H5T_STD_U32LE),
                                   FIELD(KeyRec, shape_off, H5T_STD_U32LE), FIELD(KeyRec, ndim, H5T_STD_U32LE),
                                   FIELD(KeyRec, dtype, H5T_STD_U8LE), FIELD(KeyRec, kind, H5T_STD_U8LE)});
}
Hid run_type() {
  return compound(sizeof(RunRec), {FIELD(RunRec, file, H5T_STD_U32LE), FIELD(RunRec, dataset, H5T_STD_U32LE),
                                   FIELD(RunRec, key, H5T_STD_U32LE), FIELD(RunRec, chunk_elems, H5T_STD_U32LE),
                                   FIELD(RunRec, lo, H5T_STD_U64LE), FIELD(RunRec, numel, H5T_STD_U64LE),
                                   FIELD(RunRec, dtype, H5T_STD_U8LE), FIELD(RunRec, filters, H5T_STD_U8LE)});
}
Hid chunk_type() {
  return compound(sizeof(ChunkRec),
                  {FIELD(ChunkRec, run, H5T_STD_U32LE), FIELD(ChunkRec, length, H5T_STD_U32LE),
                   FIELD(ChunkRec, offset, H5T_STD_U64LE), FIELD(ChunkRec, stored_bytes, H5T_STD_U32LE),
                   FIELD(ChunkRec, flags, H5T_STD_U32LE), FIELD(ChunkRec, checksum_stored, H5T_STD_U64LE),
                   FIELD(ChunkRec, checksum_logical, H5T_STD_U64LE)});
}
Hid pad_type() {
  return compound(sizeof(PadRec), {FIELD(PadRec, key, H5T_STD_U32LE), FIELD(PadRec, lo, H5T_STD_U64LE),
                                   FIELD(PadRec, hi, H5T_STD_U64LE)});
}

// The dtype codes: the order of fpg::DType when format 1.0 was defined, frozen here.
constexpr DType kCodes[] = {DType::BOOL,    DType::U8,          DType::I8,          DType::F8_E5M2, DType::F8_E4M3,
                            DType::F8_E8M0, DType::F8_E4M3FNUZ, DType::F8_E5M2FNUZ, DType::F4,      DType::F6_E2M3,
                            DType::F6_E3M2, DType::I16,         DType::U16,         DType::F16,     DType::BF16,
                            DType::I32,     DType::U32,         DType::F32,         DType::C64,     DType::F64,
                            DType::I64,     DType::U64};

void write_table(hid_t file, const std::string& path, const char* name, hid_t type, const void* data, size_t n) {
  const hsize_t dims[1] = {n};
  Hid space = checked(H5Screate_simple(1, dims, nullptr), H5Sclose, path, "dataspace");
  Hid dcpl = checked(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, path, "property list");
  H5Pset_obj_track_times(dcpl, 0);  // reproducible files
  Hid ds = checked(H5Dcreate2(file, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), H5Dclose, path,
                   std::string("create /") + name);
  if (n > 0 && H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) hdf5_fail(path, std::string("write /") + name);
}

void write_string_attr(hid_t obj, const std::string& path, const char* name, const std::string& value) {
  Hid type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type, std::max<size_t>(1, value.size()));
  H5Tset_strpad(type, H5T_STR_NULLPAD);
  H5Tset_cset(type, H5T_CSET_UTF8);
  Hid space(H5Screate(H5S_SCALAR), H5Sclose);
  Hid a = checked(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose, path, std::string("attribute ") + name);
  std::string buf = value.empty() ? std::string(1, '\0') : value;
  if (H5Awrite(a, type, buf.data()) < 0) hdf5_fail(path, std::string("write attribute ") + name);
}

// A dataset or attribute must store exactly `n` elements of `elem` bytes: what is read is then bounded
// by the bytes the file holds (its dataspace and type alone can claim any size, and an unwritten
// dataset reads as fill values).
void check_stored(hsize_t stored, uint64_t n, size_t elem, const std::string& path, const std::string& what) {
  if (elem == 0 || n > UINT64_MAX / elem || n * elem != stored)
    throw FormatError(path + ": " + what + " stores " + std::to_string(stored) + " bytes for " + std::to_string(n) +
                      " elements of " + std::to_string(elem) + " bytes");
}

// A fixed-length string (attribute or dataset), trailing NULs dropped.
std::string read_string(hid_t obj, bool attribute, const std::string& path, const std::string& what) {
  Hid type = attribute ? checked(H5Aget_type(obj), H5Tclose, path, what) : checked(H5Dget_type(obj), H5Tclose, path, what);
  if (H5Tget_class(type) != H5T_STRING || H5Tis_variable_str(type) > 0)
    throw FormatError(path + ": " + what + " is not a fixed-length string");
  // One string, stored: a dataspace of several would overflow the buffer, and a string type of
  // gigabytes over a few stored bytes would take all memory.
  Hid space = attribute ? checked(H5Aget_space(obj), H5Sclose, path, what) : checked(H5Dget_space(obj), H5Sclose, path, what);
  if (H5Sget_simple_extent_npoints(space) != 1) throw FormatError(path + ": " + what + " is not a single string");
  const size_t size = H5Tget_size(type);
  check_stored(attribute ? H5Aget_storage_size(obj) : H5Dget_storage_size(obj), 1, size, path, what);
  std::string buf(size, '\0');
  Hid mem(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(mem, size);
  H5Tset_strpad(mem, H5T_STR_NULLPAD);
  H5Tset_cset(mem, H5Tget_cset(type));
  const herr_t rc = attribute ? H5Aread(obj, mem, buf.data()) : H5Dread(obj, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data());
  if (rc < 0) hdf5_fail(path, "read " + what);
  while (!buf.empty() && buf.back() == '\0') buf.pop_back();
  return buf;
}

// The number of records of the 1-D table `ds`, once it is sure that they are stored: a dataspace of
// 2^40 records over a few bytes of storage would otherwise take all memory to read. A table that
// passes through a filter may expand, at most as much as deflate (HDF5's strongest standard
// filter, about 1032:1) allows.
hsize_t table_length(hid_t ds, const std::string& path, const std::string& object) {
  Hid space = checked(H5Dget_space(ds), H5Sclose, path, object);
  if (H5Sget_simple_extent_ndims(space) != 1) throw FormatError(path + ": " + object + " is not 1-D");
  hsize_t n = 0;
  H5Sget_simple_extent_dims(space, &n, nullptr);
  Hid ftype = checked(H5Dget_type(ds), H5Tclose, path, object);
  Hid dcpl = checked(H5Dget_create_plist(ds), H5Pclose, path, object);
  const size_t record = std::max<size_t>(1, H5Tget_size(ftype));
  const uint64_t stored = H5Dget_storage_size(ds);
  const uint64_t expansion = H5Pget_nfilters(dcpl) > 0 ? 1100 : 1;
  if (n > 0 && (n > UINT64_MAX / record || n * record / expansion > stored))
    throw FormatError(path + ": " + object + " declares " + std::to_string(n) + " records of " + std::to_string(record) +
                      " bytes but stores " + std::to_string(stored) + " bytes");
  return n;
}

template <class Rec>
std::vector<Rec> read_table(hid_t file, const std::string& path, const char* name, hid_t type) {
  Hid ds = open_own_dataset(file, name, path, std::string("table /") + name);
  const hsize_t n = table_length(ds, path, std::string("table /") + name);
  Hid ftype = checked(H5Dget_type(ds), H5Tclose, path, std::string("/") + name);
  if (H5Tget_size(ftype) != sizeof(Rec))
    throw FormatError(path + ": /" + std::string(name) + " has " + std::to_string(H5Tget_size(ftype)) +
                      "-byte records, expected " + std::to_string(sizeof(Rec)));
  // The records are read as written, without a conversion: HDF5's conversion of a hostile compound
  // type reads out of bounds (1.10.8).
  if (H5Tequal(ftype, type) <= 0)
    throw FormatError(path + ": /" + std::string(name) + " does not have the record type this format defines");
  check_stored(H5Dget_storage_size(ds), n, sizeof(Rec), path, std::string("/") + name);
  std::vector<Rec> out(n);
  if (n > 0 && H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
    hdf5_fail(path, std::string("read /") + name);
  return out;
}

std::string pool_string(const std::vector<char>& pool, uint64_t off, uint32_t len, const std::string& path,
                        const char* what, size_t i) {
  if (off > pool.size() || len > pool.size() - off)
    throw FormatError(path + ": " + what + " " + std::to_string(i) + " names bytes outside /names");
  return std::string(pool.data() + off, len);
}

// The tables as they lie on disk: what the index checksum covers, byte for byte.
struct Tables {
  std::vector<char> names;
  std::vector<FileRec> files;
  std::vector<KeyRec> keys;
  std::vector<uint64_t> shapes;
  std::vector<RunRec> runs;
  std::vector<ChunkRec> chunks;
  std::vector<PadRec> pads;
};

template <class T>
void hash_table(ckpt::StreamChecksum& h, const std::vector<T>& t) {
  h.update_sized(t.data(), t.size() * sizeof(T));
}

// The index checksum (man 5 fpgather-format, "Index checksum"): XXH3-64 of the format version,
// the producer, every document (name and text, in name order) and every table's packed records,
// each field preceded by its byte length.
uint64_t index_checksum(const ckpt::FormatVersion& v, const std::string& producer, const ckpt::Documents& docs,
                        const Tables& t) {
  ckpt::StreamChecksum h;
  const uint32_t version[2] = {v.major, v.minor};
  h.update_sized(version, sizeof version);
  h.update_sized(producer.data(), producer.size());
  const uint64_t ndocs = docs.size();
  h.update(&ndocs, sizeof ndocs);
  for (const auto& [name, text] : docs.all()) {
    h.update_sized(name.data(), name.size());
    h.update_sized(text.data(), text.size());
  }
  hash_table(h, t.names);
  hash_table(h, t.files);
  hash_table(h, t.keys);
  hash_table(h, t.shapes);
  hash_table(h, t.runs);
  hash_table(h, t.chunks);
  hash_table(h, t.pads);
  return h.digest();
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

uint8_t dtype_code(DType t) {
  for (size_t i = 0; i < std::size(kCodes); ++i)
    if (kCodes[i] == t) return static_cast<uint8_t>(i);
  return 255;
}

bool dtype_from_code(uint8_t code, DType& out) {
  if (code >= std::size(kCodes)) return false;
  out = kCodes[code];
  return true;
}

void write_index(const std::string& path, const ckpt::Index& ix) {
  // Build every table first, outside the HDF5 lock.
  Tables t;
  std::vector<char>& names = t.names;
  auto intern = [&](const std::string& s) {
    const uint64_t off = names.size();
    names.insert(names.end(), s.begin(), s.end());
    return off;
  };
  std::vector<FileRec>& files = t.files;
  files.reserve(ix.files.size());
  for (const auto& f : ix.files)
    files.push_back({intern(f.name), static_cast<uint32_t>(f.name.size()), f.rank, f.size});
  std::vector<KeyRec>& keys = t.keys;
  std::vector<uint64_t>& shapes = t.shapes;
  keys.reserve(ix.keys.size());
  for (const auto& k : ix.keys) {
    keys.push_back({intern(k.name), static_cast<uint32_t>(k.name.size()), static_cast<uint32_t>(shapes.size()),
                    static_cast<uint32_t>(k.shape.size()), dtype_code(k.dtype), static_cast<uint8_t>(k.kind)});
    shapes.insert(shapes.end(), k.shape.begin(), k.shape.end());
  }
  std::vector<RunRec>& runs = t.runs;
  runs.reserve(ix.runs.size());
  for (const auto& r : ix.runs)
    runs.push_back({r.file, r.dataset, r.key, r.chunk_elems, r.lo, r.numel, dtype_code(r.dtype),
                    static_cast<uint8_t>(r.filters)});
  std::vector<ChunkRec>& chunks = t.chunks;
  chunks.reserve(ix.chunks.size());
  for (const auto& c : ix.chunks)
    chunks.push_back({c.run, c.length, c.offset, c.stored_bytes, c.flags, c.checksum_stored, c.checksum_logical});
  std::vector<PadRec>& pads = t.pads;
  pads.reserve(ix.padding.size());
  for (const auto& p : ix.padding) pads.push_back({p.key, p.lo, p.hi});
  const bool sealed = ckpt::has_index_checksum(ix.version);
  const uint64_t seal = sealed ? index_checksum(ix.version, ix.producer, ix.documents, t) : 0;

  {
    std::lock_guard<std::mutex> lock(hdf5_mutex());
    hdf5_init();
    Hid fcpl = checked(H5Pcreate(H5P_FILE_CREATE), H5Pclose, path, "property list");
    H5Pset_obj_track_times(fcpl, 0);
    OutputFile file(checked(H5Fcreate(path.c_str(), H5F_ACC_EXCL, fcpl, H5P_DEFAULT), H5Fclose, path, "create index"), path);
    write_string_attr(file, path, "format", kFormatMagic);
    {
      const uint32_t v[2] = {ix.version.major, ix.version.minor};
      const hsize_t two = 2;
      Hid space(H5Screate_simple(1, &two, nullptr), H5Sclose);
      Hid a = checked(H5Acreate2(file, "format_version", H5T_STD_U32LE, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
                      path, "attribute format_version");
      if (H5Awrite(a, H5T_NATIVE_UINT32, v) < 0) hdf5_fail(path, "write format_version");
    }
    write_string_attr(file, path, "producer", ix.producer);
    if (sealed) {
      Hid space(H5Screate(H5S_SCALAR), H5Sclose);
      Hid a = checked(H5Acreate2(file, "index_checksum", H5T_STD_U64LE, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
                      path, "attribute index_checksum");
      if (H5Awrite(a, H5T_NATIVE_UINT64, &seal) < 0) hdf5_fail(path, "write index_checksum");
    }
    {
      Hid gcpl = checked(H5Pcreate(H5P_GROUP_CREATE), H5Pclose, path, "property list");
      H5Pset_obj_track_times(gcpl, 0);
      Hid docs = checked(H5Gcreate2(file, "documents", H5P_DEFAULT, gcpl, H5P_DEFAULT), H5Gclose, path, "create /documents");
      for (const auto& [name, text] : ix.documents.all()) {
        Hid type(H5Tcopy(H5T_C_S1), H5Tclose);
        H5Tset_size(type, std::max<size_t>(1, text.size()));
        H5Tset_strpad(type, H5T_STR_NULLPAD);
        H5Tset_cset(type, H5T_CSET_UTF8);
        Hid space(H5Screate(H5S_SCALAR), H5Sclose);
        Hid dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
        H5Pset_obj_track_times(dcpl, 0);
        Hid ds = checked(H5Dcreate2(docs, name.c_str(), type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), H5Dclose, path,
                         "create /documents/" + name);
        const std::string buf = text.empty() ? std::string(1, '\0') : text;
        if (H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) < 0) hdf5_fail(path, "write /documents/" + name);
      }
    }
    write_table(file, path, "names", H5T_STD_U8LE, names.data(), names.size());
    write_table(file, path, "files", file_type(), files.data(), files.size());
    write_table(file, path, "keys", key_type(), keys.data(), keys.size());
    write_table(file, path, "shapes", H5T_STD_U64LE, shapes.data(), shapes.size());
    write_table(file, path, "runs", run_type(), runs.data(), runs.size());
    write_table(file, path, "chunks", chunk_type(), chunks.data(), chunks.size());
    write_table(file, path, "padding", pad_type(), pads.data(), pads.size());
    file.close();
  }
  fs::fsync_file(path);
}

namespace {
herr_t collect_doc(hid_t, const char* name, const H5L_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->push_back(name);
  return 0;
}
}  // namespace

namespace {

// The index in the HDF5 file that `open` returns (called with the HDF5 mutex held); `path` names it
// in messages.
template <class Open>
ckpt::Index read_index_with(const std::string& path, Open open) {
  ckpt::Index ix;
  Tables t;
  std::vector<char>& names = t.names;
  std::vector<FileRec>& files = t.files;
  std::vector<KeyRec>& keys = t.keys;
  std::vector<uint64_t>& shapes = t.shapes;
  std::vector<RunRec>& runs = t.runs;
  std::vector<ChunkRec>& chunks = t.chunks;
  std::vector<PadRec>& pads = t.pads;
  bool sealed = false;
  uint64_t seal = 0;
  {
    std::lock_guard<std::mutex> lock(hdf5_mutex());
    hdf5_init();
    Hid file = open();
    if (H5Aexists(file, "format") <= 0) throw FormatError(path + ": not an fpgather checkpoint index (no `format` attribute)");
    {
      Hid a = checked(H5Aopen(file, "format", H5P_DEFAULT), H5Aclose, path, "attribute format");
      if (read_string(a, true, path, "attribute format") != kFormatMagic)
        throw FormatError(path + ": not an fpgather checkpoint index (`format` attribute differs)");
    }
    {
      Hid a = checked(H5Aopen(file, "format_version", H5P_DEFAULT), H5Aclose, path, "attribute format_version");
      Hid space(H5Aget_space(a), H5Sclose);
      if (H5Sget_simple_extent_npoints(space) != 2) throw FormatError(path + ": format_version must hold [major, minor]");
      uint32_t v[2] = {0, 0};
      if (H5Aread(a, H5T_NATIVE_UINT32, v) < 0) hdf5_fail(path, "read format_version");
      ix.version = {v[0], v[1]};
      if (!ckpt::readable(ix.version)) {
        const bool newer = ix.version.major > ckpt::kFormatVersion.major;
        throw VersionError(path + ": checkpoint format version " + ckpt::to_string(ix.version) +
                               (newer ? " is newer than this fpgather reads (format " + ckpt::to_string(ckpt::kFormatVersion) +
                                            " and older); use a newer fpgather"
                                      : " is older than any this fpgather reads"),
                           ix.version);
      }
    }
    if (H5Aexists(file, "producer") > 0) {
      Hid a = checked(H5Aopen(file, "producer", H5P_DEFAULT), H5Aclose, path, "attribute producer");
      ix.producer = read_string(a, true, path, "attribute producer");
    }
    if (H5Aexists(file, "index_checksum") > 0) {
      Hid a = checked(H5Aopen(file, "index_checksum", H5P_DEFAULT), H5Aclose, path, "attribute index_checksum");
      Hid space(H5Aget_space(a), H5Sclose);
      if (H5Sget_simple_extent_npoints(space) != 1) throw FormatError(path + ": index_checksum must be one integer");
      if (H5Aread(a, H5T_NATIVE_UINT64, &seal) < 0) hdf5_fail(path, "read index_checksum");
      sealed = true;
    }
    if (H5Lexists(file, "documents", H5P_DEFAULT) > 0) {
      Hid g = open_own_group(file, "documents", path, "/documents");
      std::vector<std::string> doc_names;
      H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_doc, &doc_names);
      for (const auto& n : doc_names) {
        Hid ds = open_own_dataset(g, n, path, "/documents/" + n);
        ix.documents.set_unchecked(n, read_string(ds, false, path, "/documents/" + n));
      }
    }
    {
      Hid ds = open_own_dataset(file, "names", path, "/names");
      Hid space = checked(H5Dget_space(ds), H5Sclose, path, "/names");
      Hid ftype = checked(H5Dget_type(ds), H5Tclose, path, "/names");
      const hssize_t n = H5Sget_simple_extent_npoints(space);
      if (n < 0) hdf5_fail(path, "/names");
      if (H5Tequal(ftype, H5T_STD_U8LE) <= 0) throw FormatError(path + ": /names is not an array of bytes");
      check_stored(H5Dget_storage_size(ds), static_cast<uint64_t>(n), 1, path, "/names");
      names.resize(static_cast<size_t>(n));
      if (!names.empty() && H5Dread(ds, H5T_STD_U8LE, H5S_ALL, H5S_ALL, H5P_DEFAULT, names.data()) < 0)
        hdf5_fail(path, "read /names");
    }
    files = read_table<FileRec>(file, path, "files", file_type());
    keys = read_table<KeyRec>(file, path, "keys", key_type());
    shapes = read_table<uint64_t>(file, path, "shapes", H5T_NATIVE_UINT64);
    runs = read_table<RunRec>(file, path, "runs", run_type());
    chunks = read_table<ChunkRec>(file, path, "chunks", chunk_type());
    pads = read_table<PadRec>(file, path, "padding", pad_type());
  }

  if (!ckpt::has_index_checksum(ix.version)) {
    ix.index_checksum = ckpt::IndexChecksum::absent;
  } else if (!sealed) {
    ix.index_checksum = ckpt::IndexChecksum::mismatch;
    ix.index_checksum_detail = "no index_checksum attribute, which format " + ckpt::to_string(ix.version) + " requires";
  } else if (const uint64_t computed = index_checksum(ix.version, ix.producer, ix.documents, t); computed != seal) {
    ix.index_checksum = ckpt::IndexChecksum::mismatch;
    ix.index_checksum_detail = "index_checksum records " + hex(seal) + ", the tables and documents hash to " + hex(computed);
  }
  ix.files.reserve(files.size());
  for (size_t i = 0; i < files.size(); ++i)
    ix.files.push_back({pool_string(names, files[i].name_off, files[i].name_len, path, "file", i), files[i].rank, files[i].size});
  ix.keys.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const KeyRec& r = keys[i];
    ckpt::Key k;
    k.name = pool_string(names, r.name_off, r.name_len, path, "key", i);
    if (!dtype_from_code(r.dtype, k.dtype)) throw FormatError(path + ": key " + quoted_name(k.name) + " has unknown dtype code " + std::to_string(r.dtype));
    if (r.kind >= ckpt::kKeyKindCount) throw FormatError(path + ": key " + quoted_name(k.name) + " has unknown kind " + std::to_string(r.kind));
    k.kind = static_cast<ckpt::KeyKind>(r.kind);
    if (r.shape_off > shapes.size() || r.ndim > shapes.size() - r.shape_off)
      throw FormatError(path + ": key " + quoted_name(k.name) + " names dims outside /shapes");
    k.shape.assign(shapes.begin() + r.shape_off, shapes.begin() + r.shape_off + r.ndim);
    ix.keys.push_back(std::move(k));
  }
  ix.runs.resize(runs.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunRec& r = runs[i];
    ckpt::Run& o = ix.runs[i];
    o.file = r.file;
    o.dataset = r.dataset;
    o.key = r.key;
    o.chunk_elems = r.chunk_elems;
    o.lo = r.lo;
    o.numel = r.numel;
    o.filters = r.filters;
    if (!dtype_from_code(r.dtype, o.dtype)) throw FormatError(path + ": run " + std::to_string(i) + " has unknown dtype code " + std::to_string(r.dtype));
    if (r.lo + r.numel < r.lo) throw FormatError(path + ": run " + std::to_string(i) + " overflows 64 bits");
  }
  ix.chunks.resize(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ChunkRec& r = chunks[i];
    ckpt::Chunk& c = ix.chunks[i];
    c.run = r.run;
    c.length = r.length;
    c.offset = r.offset;
    c.stored_bytes = r.stored_bytes;
    c.flags = r.flags;
    c.checksum_stored = r.checksum_stored;
    c.checksum_logical = r.checksum_logical;
    if (r.offset + r.length < r.offset) throw FormatError(path + ": chunk " + std::to_string(i) + " overflows 64 bits");
  }
  ix.padding.resize(pads.size());
  for (size_t i = 0; i < pads.size(); ++i) ix.padding[i] = {pads[i].key, pads[i].lo, pads[i].hi};
  ix.link_chunks();
  return ix;
}

}  // namespace

ckpt::Index read_index(const std::string& path) {
  return read_index_with(path, [&] { return open_checkpoint_file(path); });
}

ckpt::Index read_index_image(const std::string& name, const void* data, size_t size) {
  return read_index_with(name, [&] {
    // The core driver without a backing store: HDF5 reads its copy of the image and never the disk.
    Hid fapl = checked(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, name, "property list");
    if (H5Pset_fapl_core(fapl, 64 * 1024, 0) < 0 || H5Pset_file_image(fapl, const_cast<void*>(data), size) < 0)
      hdf5_fail(name, "file image");
    return checked(H5Fopen(name.c_str(), H5F_ACC_RDONLY, fapl), H5Fclose, name, "open index");
  });
}

}  // namespace fpg::fpckpt
