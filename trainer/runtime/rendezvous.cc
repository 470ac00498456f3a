#include "trainer/runtime/rendezvous.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "absl/strings/str_cat.h"

namespace mnemo::runtime {

struct RendezvousStore::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;
};

absl::StatusOr<std::unique_ptr<RendezvousStore>> RendezvousStore::Host(
    const std::string& host, int port, int world_size) {
  std::unique_ptr<RendezvousStore> r(new RendezvousStore());
  r->impl_ = std::make_unique<Impl>();
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(port);
    so.isServer = true;
    so.waitWorkers = false;
    so.numWorkers = world_size;
    r->impl_->store = c10::make_intrusive<c10d::TCPStore>(host, so);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot host the rendezvous store on ", host, ":", port,
                     ": ", e.what()));
  }
  return r;
}

RendezvousStore::~RendezvousStore() = default;

int RendezvousStore::port() const { return impl_->store->getPort(); }

}  // namespace mnemo::runtime
