#include "tools/hostile_ckpt.h"

#include <hdf5.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <stdexcept>

#include "ckpt/documents.h"
#include "ckpt/index.h"
#include "formats/fpckpt/index_file.h"

namespace fpg::testing {
namespace {

void ok(herr_t rc, const std::string& what) {
  if (rc < 0) throw std::runtime_error("hostile checkpoint: " + what + " failed");
}

hid_t must(hid_t id, const std::string& what) {
  if (id < 0) throw std::runtime_error("hostile checkpoint: " + what + " failed");
  return id;
}

// The bytes of the dataset `name` (1-D, uint8) of the HDF5 file `path`.
std::string read_bytes(const std::string& path, const char* name) {
  const hid_t f = must(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "open " + path);
  const hid_t ds = must(H5Dopen2(f, name, H5P_DEFAULT), std::string("open /") + name);
  const hid_t space = H5Dget_space(ds);
  std::string out(static_cast<size_t>(H5Sget_simple_extent_npoints(space)), '\0');
  const herr_t rc = out.empty() ? 0 : H5Dread(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data());
  H5Sclose(space);
  H5Dclose(ds);
  H5Fclose(f);
  ok(rc, std::string("read /") + name);
  return out;
}

// `json` with the string value of its first "name" key replaced by kOutsideSecret.
std::string renamed(const std::string& json) {
  const size_t key = json.find("\"name\"");
  const size_t open = key == std::string::npos ? key : json.find('"', json.find(':', key));
  const size_t close = open == std::string::npos ? open : json.find('"', open + 1);
  if (close == std::string::npos) throw std::runtime_error("hostile checkpoint: model document has no name");
  return json.substr(0, open + 1) + kOutsideSecret + json.substr(close);
}

// The name pool of `ix` with the first key's name overwritten by kOutsideSecret, repeated.
std::string secret_pool(const std::string& pool, const ckpt::Index& ix) {
  std::string out = pool;
  const size_t at = ix.keys.empty() ? std::string::npos : out.find(ix.keys[0].name);
  if (at == std::string::npos) throw std::runtime_error("hostile checkpoint: first key not found in /names");
  std::string fill;
  while (fill.size() < ix.keys[0].name.size()) fill += kOutsideSecret;
  out.replace(at, ix.keys[0].name.size(), fill.substr(0, ix.keys[0].name.size()));
  return out;
}

// A dataset of bytes `data` (1-D uint8) in `loc`, or a scalar fixed string.
void write_bytes(hid_t loc, const char* name, const std::string& data) {
  const hsize_t n = data.size();
  const hid_t space = must(H5Screate_simple(1, &n, nullptr), "dataspace");
  const hid_t ds = must(H5Dcreate2(loc, name, H5T_STD_U8LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), name);
  ok(H5Dwrite(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()), name);
  H5Dclose(ds);
  H5Sclose(space);
}

void write_string(hid_t loc, const char* name, const std::string& text) {
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, text.size());
  H5Tset_strpad(type, H5T_STR_NULLPAD);
  const hid_t space = must(H5Screate(H5S_SCALAR), "dataspace");
  const hid_t ds = must(H5Dcreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), name);
  ok(H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()), name);
  H5Dclose(ds);
  H5Sclose(space);
  H5Tclose(type);
}

// Runs `edit` on the HDF5 file at `path`, opened for writing.
template <class F>
void edit_file(const std::string& path, F edit) {
  const hid_t f = must(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), "open " + path);
  try {
    edit(f);
  } catch (...) {
    H5Fclose(f);
    throw;
  }
  ok(H5Fclose(f), "close " + path);
}

// Replaces the dataset /names of an index with one made by `dcpl` (its bytes unchanged where the
// dataset holds them itself).
void replace_names(hid_t f, hid_t dcpl, hsize_t n) {
  ok(H5Ldelete(f, "names", H5P_DEFAULT), "delete /names");
  const hid_t space = must(H5Screate_simple(1, &n, nullptr), "dataspace");
  const hid_t ds = must(H5Dcreate2(f, "names", H5T_STD_U8LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), "create /names");
  H5Dclose(ds);
  H5Sclose(space);
}

// `outside` as seen from here: absolute, or relative to the checkpoint directory `dir`.
std::string outside_path(const std::string& dir, const std::string& outside) {
  return !outside.empty() && outside[0] == '/' ? outside : dir + "/" + outside;
}

}  // namespace

void write_outside_files(const std::string& outside, const std::string& checkpoint) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const std::string index = checkpoint + "/" + fpckpt::kIndexFile;
  const ckpt::Index ix = fpckpt::read_index(index);
  const auto model = ix.documents.get(ckpt::doc::model);
  if (!model) throw std::runtime_error("hostile checkpoint: " + checkpoint + " has no model document");
  const std::string pool = secret_pool(read_bytes(index, "names"), ix);
  {
    const std::string path = outside + "/secret.h5";
    unlink(path.c_str());
    const hid_t f = must(H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT), "create " + path);
    write_string(f, "model", renamed(*model));
    write_bytes(f, "bytes", pool);
    // 256 floats: as many elements as any run of the fixtures, so a followed link reads as data.
    std::vector<float> data(256, 448.f);
    const hsize_t n = data.size();
    const hid_t space = must(H5Screate_simple(1, &n, nullptr), "dataspace");
    const hid_t ds = must(H5Dcreate2(f, "data", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "data");
    ok(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()), "data");
    H5Dclose(ds);
    H5Sclose(space);
    ok(H5Fclose(f), "close " + path);
  }
  std::ofstream(outside + "/names.bin", std::ios::binary | std::ios::trunc) << pool;
}

uint64_t stored_chunk_offset(const std::string& path, uint32_t dataset, uint64_t chunk_coord) {
  const hid_t f = must(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "open " + path);
  const hid_t ds = H5Dopen2(f, std::to_string(dataset).c_str(), H5P_DEFAULT);
  const hsize_t at[1] = {chunk_coord};
  unsigned mask = 0;
  haddr_t addr = HADDR_UNDEF;
  hsize_t size = 0;
  const herr_t rc = ds < 0 ? -1 : H5Dget_chunk_info_by_coord(ds, at, &mask, &addr, &size);
  if (ds >= 0) H5Dclose(ds);
  H5Fclose(f);
  if (rc < 0 || addr == HADDR_UNDEF) throw std::runtime_error(path + ": dataset /" + std::to_string(dataset) + " has no chunk at " + std::to_string(chunk_coord));
  return addr;
}

const std::vector<std::string>& hostile_kinds() {
  static const std::vector<std::string> k = {"run-file-out-of-range", "external-link-document", "external-storage-names",
                                             "virtual-names", "rank-file-external-link", "document-array",
                                             "huge-table"};
  return k;
}

void make_hostile(const std::string& kind, const std::string& dir, const std::string& outside) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const std::string index = dir + "/" + fpckpt::kIndexFile;
  const std::string secret_h5 = outside + "/secret.h5";
  if (kind == "run-file-out-of-range") {
    ckpt::Index ix = fpckpt::read_index(index);
    if (ix.runs.empty()) throw std::runtime_error("hostile checkpoint: " + dir + " has no runs");
    ix.runs[0].file = UINT32_MAX;
    unlink(index.c_str());
    fpckpt::write_index(index, ix);
  } else if (kind == "external-link-document") {
    edit_file(index, [&](hid_t f) {
      const hid_t g = must(H5Gopen2(f, "documents", H5P_DEFAULT), "open /documents");
      ok(H5Ldelete(g, "model", H5P_DEFAULT), "delete /documents/model");
      ok(H5Lcreate_external(secret_h5.c_str(), "/model", g, "model", H5P_DEFAULT, H5P_DEFAULT), "external link");
      H5Gclose(g);
    });
  } else if (kind == "external-storage-names") {
    edit_file(index, [&](hid_t f) {
      const hsize_t n = read_bytes(outside_path(dir, outside) + "/secret.h5", "bytes").size();
      const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
      ok(H5Pset_external(dcpl, (outside + "/names.bin").c_str(), 0, n), "external storage");
      replace_names(f, dcpl, n);
      H5Pclose(dcpl);
    });
  } else if (kind == "virtual-names") {
    edit_file(index, [&](hid_t f) {
      const hsize_t n = read_bytes(outside_path(dir, outside) + "/secret.h5", "bytes").size();
      const hid_t space = must(H5Screate_simple(1, &n, nullptr), "dataspace");
      const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
      ok(H5Pset_virtual(dcpl, space, secret_h5.c_str(), "/bytes", space), "virtual mapping");
      replace_names(f, dcpl, n);
      H5Pclose(dcpl);
      H5Sclose(space);
    });
  } else if (kind == "rank-file-external-link") {
    ckpt::Index ix = fpckpt::read_index(index);
    if (ix.runs.empty()) throw std::runtime_error("hostile checkpoint: " + dir + " has no runs");
    const std::string name = std::to_string(ix.runs[0].dataset);
    ckpt::FileEntry& file = ix.files.at(ix.runs[0].file);
    const std::string path = dir + "/" + file.name;
    edit_file(path, [&](hid_t f) {
      ok(H5Ldelete(f, name.c_str(), H5P_DEFAULT), "delete /" + name);
      ok(H5Lcreate_external(secret_h5.c_str(), "/data", f, name.c_str(), H5P_DEFAULT, H5P_DEFAULT), "external link");
    });
    // The index records the edited file's size: only the link is wrong.
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    file.size = static_cast<uint64_t>(in.tellg());
    unlink(index.c_str());
    fpckpt::write_index(index, ix);
  } else if (kind == "document-array") {
    edit_file(index, [&](hid_t f) {
      const hid_t g = must(H5Gopen2(f, "documents", H5P_DEFAULT), "open /documents");
      ok(H5Ldelete(g, "model", H5P_DEFAULT), "delete /documents/model");
      const std::string text = std::string(kOutsideSecret) + std::string(kOutsideSecret);
      const hid_t type = H5Tcopy(H5T_C_S1);
      H5Tset_size(type, text.size() / 2);
      const hsize_t two = 2;
      const hid_t space = must(H5Screate_simple(1, &two, nullptr), "dataspace");
      const hid_t ds = must(H5Dcreate2(g, "model", type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "model");
      ok(H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()), "write model");
      H5Dclose(ds);
      H5Sclose(space);
      H5Tclose(type);
      H5Gclose(g);
    });
  } else if (kind == "huge-table") {
    edit_file(index, [&](hid_t f) {
      const hid_t old_ds = must(H5Dopen2(f, "chunks", H5P_DEFAULT), "open /chunks");
      const hid_t type = H5Dget_type(old_ds);
      H5Dclose(old_ds);
      ok(H5Ldelete(f, "chunks", H5P_DEFAULT), "delete /chunks");
      const hsize_t n = hsize_t(1) << 40, chunk = 1024;
      const hid_t space = must(H5Screate_simple(1, &n, nullptr), "dataspace");
      const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
      H5Pset_chunk(dcpl, 1, &chunk);
      const hid_t ds = must(H5Dcreate2(f, "chunks", type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), "create /chunks");
      H5Dclose(ds);
      H5Pclose(dcpl);
      H5Sclose(space);
      H5Tclose(type);
    });
  } else {
    throw std::runtime_error("hostile checkpoint: unknown kind '" + kind + "'");
  }
}

}  // namespace fpg::testing
