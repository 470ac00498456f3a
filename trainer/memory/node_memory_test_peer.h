// Tests' write access to a NodeMemory's columns, to set up the states a
// test needs (outside tests only trainer/memory/ writes node memory).
#ifndef MNEMO_TRAINER_MEMORY_NODE_MEMORY_TEST_PEER_H_
#define MNEMO_TRAINER_MEMORY_NODE_MEMORY_TEST_PEER_H_

#include <cstdint>
#include <vector>

#include "trainer/memory/node_memory.h"

namespace mnemo::memory {

class NodeMemoryTestPeer {
 public:
  explicit NodeMemoryTestPeer(NodeMemory* m) : m_(m) {}
  torch::Tensor& memory() { return m_->memory_; }
  torch::Tensor& mail() { return m_->mail_; }
  std::vector<double>& last_update() { return m_->last_update_; }
  std::vector<double>& mail_time() { return m_->mail_time_; }
  std::vector<uint8_t>& has_mail() { return m_->has_mail_; }
  std::vector<int64_t>& last_event() { return m_->last_event_; }
  std::vector<double>& slot_time() { return m_->slot_time_; }
  std::vector<int64_t>& mails_received() { return m_->mails_received_; }

 private:
  NodeMemory* m_;
};

}  // namespace mnemo::memory

#endif  // MNEMO_TRAINER_MEMORY_NODE_MEMORY_TEST_PEER_H_
