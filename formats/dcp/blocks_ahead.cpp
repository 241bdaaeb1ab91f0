#include "formats/dcp/blocks_ahead.h"

#include <algorithm>

#include "core/error.h"
#include "core/thread_start.h"
#include "formats/dcp/zip/crc32.h"

namespace fpg::dcp {

BlocksAhead::BlocksAhead(std::vector<std::pair<uint64_t, FillBytes>> items, size_t block_bytes, size_t depth)
    : items_(std::move(items)), block_(std::max<size_t>(block_bytes, 1)), depth_(std::max<size_t>(depth, 1)) {
  // The thread only reads ahead: where the system refuses it, each block is filled when it is asked for.
  producer_ = try_start_thread([this] { produce(); }).value_or(std::thread());
}

BlocksAhead::~BlocksAhead() {
  {
    std::lock_guard<std::mutex> lock(m_);
    stop_ = true;
  }
  room_.notify_all();
  if (producer_.joinable()) producer_.join();
}

void BlocksAhead::produce() {
  try {
    for (size_t i = 0; i < items_.size(); ++i) {
      const auto& [size, fill] = items_[i];
      for (uint64_t off = 0; off < size; off += block_) {
        Block b;
        b.item = i;
        b.offset = off;
        {
          std::unique_lock<std::mutex> lock(m_);
          room_.wait(lock, [&] { return stop_ || queue_.size() < depth_; });
          if (stop_) return;
          if (!free_.empty()) {
            b.data = std::move(free_.back());
            free_.pop_back();
          }
        }
        b.data.resize(static_cast<size_t>(std::min<uint64_t>(block_, size - off)));
        fill(off, b.data.data(), b.data.size());
        b.crc = crc32_update(0, b.data.data(), b.data.size());
        {
          std::lock_guard<std::mutex> lock(m_);
          queue_.push_back(std::move(b));
        }
        ready_.notify_one();
      }
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(m_);
    error_ = std::current_exception();
  }
  ready_.notify_all();
}

BorrowBytes BlocksAhead::item(size_t i) {
  return [this, i](uint64_t offset, size_t size) -> BorrowedBlock {
    if (!producer_.joinable()) return fill_now(i, offset, size);
    std::unique_lock<std::mutex> lock(m_);
    if (lent_.data.data()) free_.push_back(std::move(lent_.data));  // the writer is done with it
    ready_.wait(lock, [&] { return !queue_.empty() || error_; });
    if (queue_.empty()) std::rethrow_exception(error_);
    lent_ = std::move(queue_.front());
    queue_.pop_front();
    room_.notify_one();
    if (lent_.item != i || lent_.offset != offset || lent_.data.size() != size)
      throw InternalError("blocks ahead: the writer asked for item " + std::to_string(i) + " bytes [" +
                          std::to_string(offset) + ", +" + std::to_string(size) + "), the next block is item " +
                          std::to_string(lent_.item) + " [" + std::to_string(lent_.offset) + ", +" +
                          std::to_string(lent_.data.size()) + ")");
    return {lent_.data.data(), lent_.data.size(), lent_.crc};
  };
}

BorrowedBlock BlocksAhead::fill_now(size_t i, uint64_t offset, size_t size) {
  lent_.item = i;
  lent_.offset = offset;
  lent_.data.resize(size);
  items_.at(i).second(offset, lent_.data.data(), size);
  lent_.crc = crc32_update(0, lent_.data.data(), size);
  return {lent_.data.data(), lent_.data.size(), lent_.crc};
}

}  // namespace fpg::dcp
