// fpgather._fpgather: the public C++ API (<fpgather/fpgather.h>) for Python. The report types are bound
// as read-only classes; arrays cross as buffers the caller allocates (NumPy), so tensor data is
// written once, straight into the array Python keeps. Every call that reads files or computes runs
// without the GIL. fpgather/__init__.py builds the Pythonic layer (dtypes, shapes, ranges) on top.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <fpgather/fpgather.h>

#include <cstring>
#include <memory>
#include <string>

namespace nb = nanobind;
using namespace nb::literals;

namespace {

// Python's exception classes, one per fpgather::ErrorKind, created at import.
PyObject* g_error = nullptr;
PyObject* g_check_failed = nullptr;
PyObject* g_usage = nullptr;
PyObject* g_format = nullptr;
PyObject* g_internal = nullptr;

PyObject* new_error(nb::module_& m, const char* name, PyObject* bases, int exit_code, const char* kind,
                    const char* doc) {
  const std::string qualified = std::string("fpgather.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (!cls) throw nb::python_error();
  if (exit_code >= 0) {
    PyObject_SetAttrString(cls, "exit_code", nb::int_(exit_code).ptr());
    PyObject_SetAttrString(cls, "kind", nb::str(kind).ptr());
  }
  m.attr(name) = nb::handle(cls);
  return cls;
}

void register_errors(nb::module_& m) {
  g_error = new_error(m, "Error", PyExc_Exception, -1, "",
                      "Every failure of fpgather. `exit_code` is what the fpgather command exits with for the "
                      "same failure, `kind` its name; the message is the command's.");
  nb::handle(g_error).attr("exit_code") = nb::none();
  nb::handle(g_error).attr("kind") = nb::none();
  nb::tuple usage_bases = nb::make_tuple(nb::handle(g_error), nb::handle(PyExc_ValueError));
  g_check_failed = new_error(m, "ValidationError", g_error, 1, "check_failed",
                             "A checkpoint that fails validation was refused by an operation that uses it (exit 1).");
  g_usage = new_error(m, "UsageError", usage_bases.ptr(), 2, "usage",
                      "Bad arguments, or an input the operation cannot take (exit 2). Also a ValueError.");
  g_format = new_error(m, "FormatError", g_error, 3, "format",
                       "Unreadable, malformed or truncated input, or a failed write (exit 3).");
  g_internal = new_error(m, "InternalError", g_error, 4, "internal", "A broken invariant inside fpgather (exit 4).");
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const fpgather::Error& e) {
      PyObject* cls = g_internal;
      switch (e.kind()) {
        case fpgather::ErrorKind::check_failed: cls = g_check_failed; break;
        case fpgather::ErrorKind::usage: cls = g_usage; break;
        case fpgather::ErrorKind::format: cls = g_format; break;
        case fpgather::ErrorKind::internal: cls = g_internal; break;
      }
      // The message may quote bytes of a file that are not UTF-8: each becomes \xNN, as the command
      // prints it.
      const std::string what = e.what();
      PyObject* msg = PyUnicode_DecodeUTF8(what.data(), static_cast<Py_ssize_t>(what.size()), "backslashreplace");
      if (!msg) return;
      PyErr_SetObject(cls, msg);
      Py_DECREF(msg);
    }
  });
}

// A C-contiguous array of any dtype the caller owns, seen as its bytes.
using Bytes = nb::ndarray<uint8_t, nb::c_contig, nb::device::cpu>;
using ConstBytes = nb::ndarray<const uint8_t, nb::c_contig, nb::device::cpu>;
using Floats = nb::ndarray<float, nb::c_contig, nb::device::cpu>;
using ConstFloats = nb::ndarray<const float, nb::c_contig, nb::device::cpu>;

template <class A>
auto span_of(A& a) {
  return fpgather::Span<std::remove_pointer_t<decltype(a.data())>>(a.data(), a.size());
}

// Names come from files and may hold bytes that are not UTF-8: they cross as str with each such
// byte a lone surrogate (Python's surrogateescape, as os.fsdecode does), and back the same way, so
// any name the library gives can be passed back to it.
nb::str py_str(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "surrogateescape");
  if (!o) throw nb::python_error();
  return nb::steal<nb::str>(o);
}

std::string cpp_str(const nb::str& s) {
  PyObject* b = PyUnicode_AsEncodedString(s.ptr(), "utf-8", "surrogateescape");
  if (!b) throw nb::python_error();
  std::string out(PyBytes_AS_STRING(b), static_cast<std::size_t>(PyBytes_GET_SIZE(b)));
  Py_DECREF(b);
  return out;
}

template <class T>
auto name_of(std::string T::*field) {
  return [field](const T& t) { return py_str(t.*field); };
}

// A Python callable as the library's progress callback: called with the GIL taken for the call only
// (the operation runs without it, on any of its threads). The callable is borrowed: the binding's
// arguments keep it alive for the whole operation, after which the library holds no copy. What it
// raises stops the operation and is rethrown by it (fpgather/progress.h) as a python_error, which
// nanobind raises again unchanged.
fpgather::ProgressCallback progress_of(nb::handle callable) {
  if (callable.is_none()) return {};
  return [callable](uint64_t done, uint64_t total) {
    nb::gil_scoped_acquire gil;
    callable(done, total);
  };
}

nb::bytes to_bytes(const std::vector<uint8_t>& v) { return nb::bytes(reinterpret_cast<const char*>(v.data()), v.size()); }

}  // namespace

NB_MODULE(_fpgather, m) {
  m.doc() = "The fpgather C++ API, bound for the fpgather package (import fpgather, not this).";
  register_errors(m);

  m.def("version", &fpgather::version, "MAJOR.MINOR.PATCH of the library linked in.");
  m.def("set_threads", &fpgather::set_threads, "threads"_a,
        "Worker threads of the parallel operations (reads, writes, validation with data, exports); 0: one per "
        "hardware thread.");
  m.def("set_log_level", &fpgather::set_log_level, "level"_a,
        "What the library logs to stderr: trace, debug, info, warn, error or off; '' for FPGATHER_LOG, else warn.");

  // ---- checkpoints ---------------------------------------------------------------------------------
  nb::class_<fpgather::Problem>(m, "Problem", "One thing wrong with a checkpoint (fpgather-validate(1) kinds).")
      .def_ro("kind", &fpgather::Problem::kind)
      .def_prop_ro("key", [](const fpgather::Problem& p) { return py_str(p.tensor); }, "The key it concerns; '' if none.")
      .def_ro("lo", &fpgather::Problem::lo)
      .def_ro("hi", &fpgather::Problem::hi)
      .def_prop_ro("range", [](const fpgather::Problem& p) { return nb::make_tuple(p.lo, p.hi); },
                   "The flat element range (lo, hi) it concerns.")
      .def_prop_ro("file", name_of(&fpgather::Problem::file))
      .def_prop_ro("message", name_of(&fpgather::Problem::message))
      .def_prop_ro("text", name_of(&fpgather::Problem::text), "The whole line, as `fpgather validate` prints it.")
      .def("__str__", [](const fpgather::Problem& p) { return py_str(p.text); })
      .def("__repr__", [](const fpgather::Problem& p) { return py_str("<fpgather.Problem " + p.text + ">"); });

  nb::class_<fpgather::ValidationReport>(m, "Report", "What `fpgather validate` finds.")
      .def_ro("valid", &fpgather::ValidationReport::valid)
      .def_prop_ro("ok", [](const fpgather::ValidationReport& r) { return r.valid; }, "Readable, and no problems.")
      .def_ro("readable", &fpgather::ValidationReport::readable)
      .def_ro("data_checked", &fpgather::ValidationReport::data_checked)
      .def_ro("layout_checked", &fpgather::ValidationReport::layout_checked)
      .def_ro("tensors", &fpgather::ValidationReport::tensors)
      .def_ro("chunks", &fpgather::ValidationReport::chunks)
      .def_ro("files", &fpgather::ValidationReport::files)
      .def_ro("chunks_read", &fpgather::ValidationReport::chunks_read)
      .def_ro("bytes_read", &fpgather::ValidationReport::bytes_read)
      .def_ro("problems", &fpgather::ValidationReport::problems)
      .def("__bool__", [](const fpgather::ValidationReport& r) { return r.valid; })
      .def("__repr__", [](const fpgather::ValidationReport& r) {
        return std::string("<fpgather.Report ") + (r.valid ? "valid" : r.readable ? "INVALID" : "unreadable") + ", " +
               std::to_string(r.problems.size()) + " problem" + (r.problems.size() == 1 ? "" : "s") + ">";
      });

  nb::class_<fpgather::TensorSummary>(m, "StoredTensor", "One stored key, as `fpgather inspect --keys` lists it.")
      .def_prop_ro("name", name_of(&fpgather::TensorSummary::name))
      .def_ro("kind", &fpgather::TensorSummary::kind)
      .def_ro("dtype", &fpgather::TensorSummary::dtype)
      .def_prop_ro("shape", [](const fpgather::TensorSummary& t) { return nb::tuple(nb::cast(t.shape)); })
      .def_ro("numel", &fpgather::TensorSummary::numel)
      .def_ro("bytes", &fpgather::TensorSummary::bytes)
      .def_ro("stored_bytes", &fpgather::TensorSummary::stored_bytes)
      .def_ro("chunks", &fpgather::TensorSummary::chunks)
      .def("__repr__", [](const fpgather::TensorSummary& t) { return py_str("<fpgather.StoredTensor " + t.name + " " + t.dtype + ">"); });

  nb::class_<fpgather::CheckpointSummary>(m, "_Summary")
      .def_ro("json", &fpgather::CheckpointSummary::json)
      .def_ro("tensors", &fpgather::CheckpointSummary::tensors);

  nb::class_<fpgather::Checkpoint>(m, "_Checkpoint")
      .def_static("open", &fpgather::Checkpoint::open, "path"_a, nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("path", &fpgather::Checkpoint::path)
      .def_prop_ro("format", [](const fpgather::Checkpoint& c) { return std::string(fpgather::format_name(c.format())); })
      .def(
          "validate",
          [](const fpgather::Checkpoint& c, bool data, nb::handle progress) {
            fpgather::ValidateOptions o;
            o.data = data;
            o.progress = progress_of(progress);
            nb::gil_scoped_release release;
            return c.validate(o);
          },
          "data"_a = false, "progress"_a = nb::none())
      .def(
          "inspect",
          [](const fpgather::Checkpoint& c, bool keys, bool layouts) {
            fpgather::InspectOptions o;
            o.keys = keys;
            o.layouts = layouts;
            return c.inspect(o);
          },
          "keys"_a = false, "layouts"_a = false, nb::call_guard<nb::gil_scoped_release>())
      .def(
          "inspect_key",
          [](const fpgather::Checkpoint& c, const nb::str& key) {
            const std::string k = cpp_str(key);
            nb::gil_scoped_release release;
            return c.inspect_key(k).json;
          },
          "key"_a);

  nb::class_<fpgather::ParamTensorInfo>(m, "TensorInfo",
                                        "A tensor in model space: NAME (the weight), NAME.master or NAME.<state>.")
      .def_prop_ro("name", name_of(&fpgather::ParamTensorInfo::name))
      .def_prop_ro("param", name_of(&fpgather::ParamTensorInfo::param), "The parameter it belongs to.")
      .def_prop_ro("role", name_of(&fpgather::ParamTensorInfo::role), "'weight', 'master' or the optimizer state's name.")
      .def_ro("dtype", &fpgather::ParamTensorInfo::dtype, "As safetensors names it: BF16, F32, F8_E4M3, ...")
      .def_prop_ro("shape", [](const fpgather::ParamTensorInfo& t) { return nb::tuple(nb::cast(t.shape)); })
      .def_ro("numel", &fpgather::ParamTensorInfo::numel)
      .def_ro("nbytes", &fpgather::ParamTensorInfo::bytes)
      .def("__repr__", [](const fpgather::ParamTensorInfo& t) {
        std::string s = "<fpgather.TensorInfo " + t.name + " " + t.dtype + " [";
        for (std::size_t i = 0; i < t.shape.size(); ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
        return py_str(s + "]>");
      });

  nb::class_<fpgather::ParamReader>(m, "_ParamReader")
      .def(
          "__init__",
          [](fpgather::ParamReader* self, const fpgather::Checkpoint& c, bool validate) {
            fpgather::ParamReadOptions o;
            o.validate = validate;
            nb::gil_scoped_release release;
            new (self) fpgather::ParamReader(c, o);
          },
          "checkpoint"_a, "validate"_a = true)
      .def_prop_ro("tensors", &fpgather::ParamReader::tensors, nb::rv_policy::reference_internal)
      .def("find", [](const fpgather::ParamReader& r, const nb::str& name) { return r.find(cpp_str(name)); }, "name"_a)
      .def(
          "read_into",
          [](const fpgather::ParamReader& r, std::size_t t, uint64_t lo, uint64_t hi, Bytes out) {
            nb::gil_scoped_release release;
            r.read(t, lo, hi, fpgather::Span<uint8_t>(out.data(), out.size()));
          },
          "t"_a, "lo"_a, "hi"_a, "out"_a.noconvert());

  // An array's memory under a DLPack dtype NumPy cannot export (bfloat16, the FP8 formats): the
  // result's __dlpack__ hands the same memory to torch, JAX or CuPy, and keeps `owner` (the NumPy
  // array) alive for as long as any of them holds it.
  m.def(
      "_dlpack",
      [](Bytes data, const std::vector<std::size_t>& shape, uint8_t code, uint8_t bits, nb::handle owner) {
        std::size_t n = 1;
        for (std::size_t d : shape) n *= d;
        if (n * bits / 8 != data.size())
          throw fpgather::Error(fpgather::ErrorKind::usage, "dlpack: " + std::to_string(data.size()) +
                                                                " bytes do not hold " + std::to_string(n) + " elements");
        nb::dlpack::dtype dt{code, bits, 1};
        return nb::ndarray<nb::array_api>(data.data(), shape.size(), shape.data(), owner, nullptr, dt);
      },
      "data"_a.noconvert(), "shape"_a, "code"_a, "bits"_a, "owner"_a);

  // ---- diff, reshard, convert ----------------------------------------------------------------------
  nb::class_<fpgather::ValueDifference>(m, "ValueDifference", "One differing element: its flat index and the values as text.")
      .def_ro("index", &fpgather::ValueDifference::index)
      .def_ro("a", &fpgather::ValueDifference::a)
      .def_ro("b", &fpgather::ValueDifference::b)
      .def("__repr__", [](const fpgather::ValueDifference& v) {
        return "<fpgather.ValueDifference [" + std::to_string(v.index) + "] " + v.a + " vs " + v.b + ">";
      });
  nb::class_<fpgather::TensorDifference>(m, "TensorDifference", "How one tensor differs, as `fpgather diff` reports it.")
      .def_prop_ro("tensor", name_of(&fpgather::TensorDifference::tensor))
      .def_ro("what", &fpgather::TensorDifference::what,
              "'only in A', 'only in B', 'dtype', 'shape', 'kind', 'coverage' or 'values'.")
      .def_prop_ro("detail", name_of(&fpgather::TensorDifference::detail))
      .def_ro("differing", &fpgather::TensorDifference::differing)
      .def_ro("max_abs_diff", &fpgather::TensorDifference::max_abs_diff)
      .def_ro("lo", &fpgather::TensorDifference::lo)
      .def_ro("hi", &fpgather::TensorDifference::hi)
      .def_ro("first", &fpgather::TensorDifference::first)
      .def("__repr__", [](const fpgather::TensorDifference& d) {
        return py_str("<fpgather.TensorDifference " + d.tensor + ": " + d.what + ">");
      });
  nb::class_<fpgather::DiffReport>(m, "DiffReport", "What `fpgather diff` finds.")
      .def_ro("equal", &fpgather::DiffReport::equal)
      .def_ro("model_space", &fpgather::DiffReport::model_space)
      .def_ro("tensors_compared", &fpgather::DiffReport::tensors_compared)
      .def_ro("elements_compared", &fpgather::DiffReport::elements_compared)
      .def_ro("differences", &fpgather::DiffReport::differences)
      .def("__bool__", [](const fpgather::DiffReport& r) { return r.equal; })
      .def("__repr__", [](const fpgather::DiffReport& r) {
        return std::string("<fpgather.DiffReport ") + (r.equal ? "equal" : "different") + ", " +
               std::to_string(r.differences.size()) + " differences>";
      });
  m.def(
      "_diff",
      [](const fpgather::Checkpoint& a, const fpgather::Checkpoint& b, double rtol, double atol,
         std::size_t max_reports, bool validate) {
        fpgather::DiffOptions o;
        o.rtol = rtol;
        o.atol = atol;
        o.max_reports = max_reports;
        o.validate = validate;
        return fpgather::diff(a, b, o);
      },
      "a"_a, "b"_a, "rtol"_a, "atol"_a, "max_reports"_a, "validate"_a, nb::call_guard<nb::gil_scoped_release>());

  nb::class_<fpgather::ReshardLayout>(m, "ReshardLayout", "The layout a checkpoint's optimizer state is stored for.")
      .def_ro("dp", &fpgather::ReshardLayout::dp)
      .def_ro("dist_opt", &fpgather::ReshardLayout::dist_opt)
      .def_ro("state_layout", &fpgather::ReshardLayout::state_layout)
      .def_ro("bucket_size", &fpgather::ReshardLayout::bucket_size)
      .def_ro("pad_for_nccl", &fpgather::ReshardLayout::pad_for_nccl)
      .def_ro("accumulation", &fpgather::ReshardLayout::accumulation);
  nb::class_<fpgather::ReshardReport>(m, "ReshardReport", "What `fpgather reshard` did (or, dry run, would do).")
      .def_ro("source", &fpgather::ReshardReport::source)
      .def_ro("target", &fpgather::ReshardReport::target)
      .def_ro("dry_run", &fpgather::ReshardReport::dry_run)
      .def_ro("from_", &fpgather::ReshardReport::from)
      .def_ro("to", &fpgather::ReshardReport::to)
      .def_ro("tensors", &fpgather::ReshardReport::tensors)
      .def_ro("bytes_read", &fpgather::ReshardReport::bytes_read)
      .def_ro("bytes_written", &fpgather::ReshardReport::bytes_written);
  m.def(
      "_reshard",
      [](const fpgather::Checkpoint& src, const std::string& dst, uint32_t dp, std::optional<uint64_t> bucket_size,
         std::optional<bool> pad_for_nccl, const std::string& dist_opt, const std::string& state_layout,
         std::optional<uint64_t> accumulation, const std::string& compression, const std::string& megatron_form,
         uint32_t tp, uint32_t pp, uint32_t ep, std::optional<uint64_t> first_stage_layers,
         std::optional<uint64_t> last_stage_layers, bool dry_run, nb::handle progress) {
        fpgather::ReshardOptions o;
        o.dp = dp;
        o.bucket_size = bucket_size;
        o.pad_for_nccl = pad_for_nccl;
        o.dist_opt = dist_opt;
        o.state_layout = state_layout;
        o.accumulation = accumulation;
        o.compression = compression;
        o.megatron_form = megatron_form;
        o.tp = tp;
        o.pp = pp;
        o.ep = ep;
        o.first_stage_layers = first_stage_layers;
        o.last_stage_layers = last_stage_layers;
        o.dry_run = dry_run;
        o.progress = progress_of(progress);
        nb::gil_scoped_release release;
        return fpgather::reshard(src, dst, o);
      },
      "src"_a, "dst"_a, "dp"_a, "bucket_size"_a.none(), "pad_for_nccl"_a.none(), "dist_opt"_a, "state_layout"_a,
      "accumulation"_a.none(), "compression"_a, "megatron_form"_a, "tp"_a, "pp"_a, "ep"_a, "first_stage_layers"_a.none(),
      "last_stage_layers"_a.none(), "dry_run"_a,
      "progress"_a.none());

  nb::class_<fpgather::ConvertOptions>(m, "_ConvertOptions")
      .def(nb::init<>())
      .def_rw("to", &fpgather::ConvertOptions::to)
      .def_rw("dtype", &fpgather::ConvertOptions::dtype)
      .def_rw("states", &fpgather::ConvertOptions::states)
      .def_rw("max_shard_size", &fpgather::ConvertOptions::max_shard_size)
      .def_rw("validate", &fpgather::ConvertOptions::validate)
      .def_rw("force", &fpgather::ConvertOptions::force)
      .def_rw("fp8", &fpgather::ConvertOptions::fp8)
      .def_rw("fp8_format", &fpgather::ConvertOptions::fp8_format)
      .def_rw("include", &fpgather::ConvertOptions::include)
      .def_rw("exclude", &fpgather::ConvertOptions::exclude)
      .def_rw("expert_dims", &fpgather::ConvertOptions::expert_dims)
      .def_rw("pow2_scales", &fpgather::ConvertOptions::pow2_scales, nb::for_setter(nb::arg("value").none()))
      .def_rw("mx_scale", &fpgather::ConvertOptions::mx_scale)
      .def_rw("strict", &fpgather::ConvertOptions::strict)
      .def_rw("amax_history", &fpgather::ConvertOptions::amax_history)
      .def_rw("amax_algo", &fpgather::ConvertOptions::amax_algo)
      .def_rw("dequantize", &fpgather::ConvertOptions::dequantize)
      .def_rw("compress", &fpgather::ConvertOptions::compress)
      .def_rw("arch", &fpgather::ConvertOptions::arch)
      .def_rw("hf_config", &fpgather::ConvertOptions::hf_config)
      .def_rw("tokenizer", &fpgather::ConvertOptions::tokenizer)
      .def_rw("from_masters", &fpgather::ConvertOptions::from_masters)
      .def_rw("tp", &fpgather::ConvertOptions::tp)
      .def_rw("pp", &fpgather::ConvertOptions::pp)
      .def_rw("ep", &fpgather::ConvertOptions::ep)
      .def_rw("make_vocab_size_divisible_by", &fpgather::ConvertOptions::make_vocab_size_divisible_by)
      .def_rw("layer_spec", &fpgather::ConvertOptions::layer_spec);
  nb::class_<fpgather::NonFiniteTensor>(m, "NonFiniteTensor", "A tensor quantized although it holds NaN or +-Inf.")
      .def_prop_ro("tensor", name_of(&fpgather::NonFiniteTensor::tensor))
      .def_ro("nan", &fpgather::NonFiniteTensor::nan)
      .def_ro("pos_inf", &fpgather::NonFiniteTensor::pos_inf)
      .def_ro("neg_inf", &fpgather::NonFiniteTensor::neg_inf)
      .def("__repr__", [](const fpgather::NonFiniteTensor& n) {
        return py_str("<fpgather.NonFiniteTensor " + n.tensor + ": " + std::to_string(n.nan) + " NaN, " +
                      std::to_string(n.pos_inf) + " +Inf, " + std::to_string(n.neg_inf) + " -Inf>");
      });
  nb::class_<fpgather::ConvertReport>(m, "ConvertReport", "What `fpgather convert` did and wrote.")
      .def_ro("operation", &fpgather::ConvertReport::operation,
              "quantize, dequantize, export, export_hf, import_hf, recompress or reencode_fp8.")
      .def_prop_ro("source", name_of(&fpgather::ConvertReport::source), "The checkpoint or model read.")
      .def_ro("tensors", &fpgather::ConvertReport::tensors,
              "Tensors quantized, dequantized or exported; keys recompressed; FP8 params re-encoded.")
      .def_ro("copied", &fpgather::ConvertReport::copied, "Tensors copied unchanged (quantize, dequantize).")
      .def_ro("bytes_read", &fpgather::ConvertReport::bytes_read)
      .def_ro("bytes_written", &fpgather::ConvertReport::bytes_written)
      .def_ro("files", &fpgather::ConvertReport::files, "Written, the index last where there is one.")
      .def_ro("nonfinite", &fpgather::ConvertReport::nonfinite, "Quantized tensors holding NaN or +-Inf.")
      .def_ro("json", &fpgather::ConvertReport::json, "The document `fpgather convert --json` prints.")
      .def(
          "summary", [](const fpgather::ConvertReport& r) { return nb::module_::import_("json").attr("loads")(r.json); },
          nb::sig("def summary(self) -> dict[str, typing.Any]"), "The document `fpgather convert --json` prints, as a dict.")
      .def_ro("text", &fpgather::ConvertReport::text, "The lines `fpgather convert` prints.")
      .def_ro("warnings", &fpgather::ConvertReport::warnings, "What the command warns of on stderr.")
      .def("__repr__", [](const fpgather::ConvertReport& r) {
        return py_str("<fpgather.ConvertReport " + r.operation + " " + r.source + ": " + std::to_string(r.tensors) +
                      " tensors, " + std::to_string(r.files.size()) + " files>");
      });
  m.def(
      "_convert",
      [](const nb::str& src, const nb::str& out, const fpgather::ConvertOptions& options, nb::handle progress) {
        fpgather::ConvertOptions o = options;
        o.progress = progress_of(progress);
        const std::string in = cpp_str(src), to = cpp_str(out);
        nb::gil_scoped_release release;
        return fpgather::convert(in, to, o);
      },
      "src"_a, "out"_a, "options"_a, "progress"_a.none());

  // ---- FP8 quantization ----------------------------------------------------------------------------
  nb::class_<fpgather::QuantizedTensor>(m, "_Quantized")
      .def_ro("shape", &fpgather::QuantizedTensor::shape)
      .def_ro("dtype", &fpgather::QuantizedTensor::dtype)
      .def_prop_ro("data", [](const fpgather::QuantizedTensor& q) { return to_bytes(q.data); })
      .def_ro("scale_dtype", &fpgather::QuantizedTensor::scale_dtype)
      .def_ro("scale_shape", &fpgather::QuantizedTensor::scale_shape)
      .def_prop_ro("scale_inv", [](const fpgather::QuantizedTensor& q) { return to_bytes(q.scale_inv); });
  m.def(
      "_quantize",
      [](const std::string& scaling, const std::string& format, std::optional<bool> pow2_scales,
         const std::string& mx_scale, const std::vector<uint64_t>& shape, ConstFloats values) {
        fpgather::Recipe r{scaling, format, pow2_scales, mx_scale};
        nb::gil_scoped_release release;
        return fpgather::quantize(r, shape, fpgather::Span<const float>(values.data(), values.size()));
      },
      "scaling"_a, "format"_a, "pow2_scales"_a.none(), "mx_scale"_a, "shape"_a, "values"_a);
  m.def(
      "_dequantize",
      [](const std::string& scaling, const std::string& format, std::optional<bool> pow2_scales,
         const std::string& mx_scale, const std::vector<uint64_t>& shape, const std::string& dtype, ConstBytes data,
         const std::string& scale_dtype, const std::vector<uint64_t>& scale_shape, ConstBytes scale_inv, Floats out) {
        fpgather::Recipe r{scaling, format, pow2_scales, mx_scale};
        fpgather::QuantizedTensor q;
        q.shape = shape;
        q.dtype = dtype;
        q.data.assign(data.data(), data.data() + data.size());
        q.scale_dtype = scale_dtype;
        q.scale_shape = scale_shape;
        q.scale_inv.assign(scale_inv.data(), scale_inv.data() + scale_inv.size());
        nb::gil_scoped_release release;
        const std::vector<float> v = fpgather::dequantize(r, q);
        if (v.size() != out.size())
          throw fpgather::Error(fpgather::ErrorKind::usage, "dequantize: " + std::to_string(v.size()) +
                                                                " values, the output holds " + std::to_string(out.size()));
        if (!v.empty()) std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
      },
      "scaling"_a, "format"_a, "pow2_scales"_a.none(), "mx_scale"_a, "shape"_a, "dtype"_a, "data"_a, "scale_dtype"_a,
      "scale_shape"_a, "scale_inv"_a, "out"_a.noconvert());

  // ---- optimizer steps, in place ---------------------------------------------------------------------
  m.def(
      "_adam_step",
      [](Floats param, ConstFloats grad, Floats exp_avg, Floats exp_avg_sq, int64_t step, double lr, double beta1,
         double beta2, double eps, double weight_decay, bool decoupled) {
        fpgather::AdamOptions o;
        o.lr = lr;
        o.beta1 = beta1;
        o.beta2 = beta2;
        o.eps = eps;
        o.weight_decay = weight_decay;
        o.decoupled_weight_decay = decoupled;
        nb::gil_scoped_release release;
        fpgather::adam_step(o, step, span_of(param), span_of(grad), span_of(exp_avg), span_of(exp_avg_sq));
      },
      "param"_a.noconvert(), "grad"_a, "exp_avg"_a.noconvert(), "exp_avg_sq"_a.noconvert(), "step"_a, "lr"_a, "beta1"_a, "beta2"_a, "eps"_a,
      "weight_decay"_a, "decoupled_weight_decay"_a);
  m.def(
      "_lion_step",
      [](Floats param, ConstFloats grad, Floats exp_avg, double lr, double beta1, double beta2, double weight_decay) {
        fpgather::LionOptions o{lr, beta1, beta2, weight_decay};
        nb::gil_scoped_release release;
        fpgather::lion_step(o, span_of(param), span_of(grad), span_of(exp_avg));
      },
      "param"_a.noconvert(), "grad"_a, "exp_avg"_a.noconvert(), "lr"_a, "beta1"_a, "beta2"_a, "weight_decay"_a);
  m.def(
      "_muon_step",
      [](Floats param, ConstFloats grad, Floats momentum, uint64_t rows, uint64_t cols, double lr, double weight_decay,
         double mom, bool nesterov, int ns_steps, const std::string& adjust_lr) {
        fpgather::MuonOptions o;
        o.lr = lr;
        o.weight_decay = weight_decay;
        o.momentum = mom;
        o.nesterov = nesterov;
        o.ns_steps = ns_steps;
        o.adjust_lr = adjust_lr;
        nb::gil_scoped_release release;
        fpgather::muon_step(o, span_of(param), span_of(grad), span_of(momentum), rows, cols);
      },
      "param"_a.noconvert(), "grad"_a, "momentum"_a.noconvert(), "rows"_a, "cols"_a, "lr"_a, "weight_decay"_a, "momentum_factor"_a,
      "nesterov"_a, "ns_steps"_a, "adjust_lr"_a);
}
