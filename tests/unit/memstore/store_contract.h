// The NodeStateStore contract, as one parameterized gtest suite that every
// backend runs (the local RAM / RocksDB store here, the gRPC client in
// services/). Usage, in a test file linked with mnemo_memstore_contract:
//
//   #include "tests/unit/memstore/store_contract.h"
//   using mnemo::memstore::testing::StoreBackend;
//   MNEMO_INSTANTIATE_STORE_CONTRACT(Grpc,
//       StoreBackend{"grpc", [](int dim) { return MakeGrpcStore(dim); }});
//
// Each call of a factory must return a new, empty store of width `dim`.
#ifndef MNEMO_TESTS_UNIT_MEMSTORE_STORE_CONTRACT_H_
#define MNEMO_TESTS_UNIT_MEMSTORE_STORE_CONTRACT_H_

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "memstore/node_state_store.h"

namespace mnemo::memstore::testing {

using StoreFactory =
    std::function<absl::StatusOr<std::unique_ptr<NodeStateStore>>(int dim)>;

struct StoreBackend {
  std::string name;  // test-name suffix: letters, digits, '_'
  StoreFactory factory;
};

class StoreContractTest : public ::testing::TestWithParam<StoreBackend> {
 protected:
  // A new empty store of width `dim`; fails the test on error.
  std::unique_ptr<NodeStateStore> NewStore(int dim);
};

inline std::string StoreBackendName(
    const ::testing::TestParamInfo<StoreBackend>& info) {
  return info.param.name;
}

}  // namespace mnemo::memstore::testing

// Runs the whole contract suite once per StoreBackend argument.
// Use at namespace scope.
#define MNEMO_INSTANTIATE_STORE_CONTRACT(prefix, ...)                      \
  using StoreContractTest = ::mnemo::memstore::testing::StoreContractTest; \
  INSTANTIATE_TEST_SUITE_P(prefix, StoreContractTest,                      \
                           ::testing::Values(__VA_ARGS__),                 \
                           ::mnemo::memstore::testing::StoreBackendName)

#endif  // MNEMO_TESTS_UNIT_MEMSTORE_STORE_CONTRACT_H_
