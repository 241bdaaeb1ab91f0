// How `fpgather convert` puts an output in place: never over an existing one unless asked, and
// then never half: every file is written into a staging directory beside OUT, and only when the
// whole output is complete is it swapped in, so OUT is never a mix of old and new files.
//
// OUT takes one of three forms (output_kind):
//   file       "X.safetensors": renamed over OUT in one rename().
//   index      "X.json": the index and the files it names, in OUT's directory (which may hold other
//              things). With force, the files the old index names and the files being written are
//              moved away first, then the new files renamed in, the index last.
//   directory  anything else: the directory as a whole. With force an existing OUT is exchanged
//              with the staged one in one renameat2(RENAME_EXCHANGE) where the file system offers
//              it (else renamed away, then the new one renamed in), and the old one removed. An
//              existing empty directory is filled instead (it stays, with its permissions).
// Without force an existing OUT (a file, an index, a non-empty directory, or any file an index
// would write) is refused with UsageError naming it, before anything is written.
//
// Safety: OUT may never be, hold or replace a file the conversion reads (`inputs`); with force a
// directory OUT is replaced only if it holds no subdirectory (a convert output never does; a home
// or project directory given by mistake always does) and is not the working directory or above it.
// The staging directory is ".NAME.fpgather-staging-XXXXXX" beside OUT, locked while its writer lives;
// one a killed run left is removed by the next conversion to OUT (core/staging.h). A conversion
// stopped by a signal (core/interrupt.h) commits nothing.
#pragma once

#include <string>
#include <vector>

namespace fpg::app::convert {

enum class OutputKind { file, index, directory };

// ".safetensors" -> file, ".json" -> index, anything else -> directory.
OutputKind output_kind(const std::string& out);

class StagedOutput {
 public:
  StagedOutput(const std::string& out, OutputKind kind, bool force, const std::vector<std::string>& inputs = {});
  ~StagedOutput();  // removes the staging directory unless committed
  StagedOutput(const StagedOutput&) = delete;
  StagedOutput& operator=(const StagedOutput&) = delete;

  OutputKind kind() const { return kind_; }
  // Where the output's files lie once committed, as the user named it: OUT for a directory, OUT's
  // directory for a file or an index.
  const std::string& dir() const { return display_dir_; }
  // The committed path of file `name` of dir().
  std::string final_path(const std::string& name) const;

  // Reserves file `name` of dir() and returns the path to write it at now. UsageError for a name
  // reserved twice, a name that is an input, and (index form, without force) a file that exists.
  // The file form has the one name of OUT.
  std::string stage(const std::string& name);
  // Directory form: the staged directory, not created, for a writer that creates its own target
  // (a format's checkpoint writer: ckpt::StateStore::begin_save, Format::write_params).
  std::string staged_dir() const { return staged_dir_; }

  // Puts the staged output in place (see above) and removes the staging directory. FormatError
  // when a rename fails; what was moved is then moved back where possible.
  void commit();

 private:
  void check_index_force();
  void commit_file();
  void commit_index();
  void commit_directory();

  OutputKind kind_;
  bool force_;
  std::string out_;          // absolute, normalized
  std::string final_dir_;    // absolute: OUT (directory) or OUT's parent
  std::string display_out_, display_dir_;
  std::vector<std::string> inputs_;  // canonical
  std::string root_;         // the staging directory beside OUT
  std::string staged_dir_;   // where staged files go: root_ (file, index) or root_/NAME (directory)
  std::vector<std::string> names_;   // reserved file names
  std::vector<std::string> old_files_;  // index form with force: files of the old index to move away
  bool committed_ = false;
  bool keep_root_ = false;   // a failed commit left old files in root_: never removed
  int lock_fd_ = -1;         // holds the writer's lock on root_ (core/staging.h)
};

}  // namespace fpg::app::convert
