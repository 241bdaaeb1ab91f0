// The `.metadata` pickle of a PyTorch Distributed Checkpoint, written from the metadata model that
// metadata.h decodes, in the form torch's FileSystemWriter pickles it (torch 2.11, which Megatron-Core
// 0.19.2 runs on; FileSystemReader.read_metadata loads it with pickle.load):
//
//   Metadata(state_dict_metadata={fqn: TensorStorageMetadata(properties, size, chunks) |
//            BytesStorageMetadata()}, planner_data, storage_data={MetadataIndex: _StorageInfo},
//            storage_meta=StorageMeta(checkpoint_id, save_id, load_id, modules), version, <extra>)
//
// Each dataclass instance is NEWOBJ of its class with no arguments and BUILD with its __dict__ in
// field order; TensorProperties is BUILD with its __getstate__ tuple (dtype, layout via
// torch.serialization._get_layout, requires_grad, _MEM_FORMAT_ENCODING, pin_memory), plus strides
// only when the model has them (torch 2.11 writes the five fields, 2.15 writes six and reads either);
// torch.Size is REDUCE of torch.Size with a tuple. MetadataIndex holds fqn, index and,
// for a tensor chunk, offset; _StorageInfo leaves out transform_descriptors when there are none, as
// torch does. planner_data is the default planner's {fqn: (path, ...)} when the model has paths
// (path elements are written as str; the model keeps int elements as decimal text), otherwise an
// `extra` entry named planner_data, otherwise None. Further `extra` fields (Megatron's mcore_data)
// follow version. Pickle protocol 2 (pickle_writer.h).
#pragma once

#include <string>

#include "formats/dcp/metadata/metadata.h"

namespace fpg::dcp {

// Throws fpg::UsageError for what torch could not read back: an entry without a dtype, a memory format
// other than contiguous, channels_last or preserve, a layout not named "torch.<layout>".
std::string metadata_pickle(const Metadata& m);

}  // namespace fpg::dcp
