// IdMap: a job's dense <-> original node id map, as the memory-store
// service answers Get/BatchGet/ListRecent by original id with it.
#ifndef MNEMO_SERVICES_ID_MAP_H_
#define MNEMO_SERVICES_ID_MAP_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mnemo::services {

// The job's dense <-> original node id map (id_map.csv as written by
// `mnemo train --out` and `mnemo data --id-map`: header
// "dense_id,original_id[,kind]"). Immutable after loading.
class IdMap {
 public:
  struct Entry {
    int64_t original_id = 0;
    std::string kind;  // "user", "item" or empty
  };

  // INVALID_ARGUMENT naming file and line on malformed input; NOT_FOUND if
  // the file cannot be read.
  static absl::StatusOr<IdMap> Load(const std::string& path);

  bool empty() const { return original_.empty(); }
  // One past the largest dense id (0 when empty).
  int64_t dense_end() const { return dense_end_; }
  // The dense ids with this original id (two for a bipartite dataset whose
  // users and items share ids), restricted to `kind` unless it is empty.
  std::vector<int64_t> DenseIds(int64_t original_id,
                                const std::string& kind) const;
  // nullopt when `dense_id` is not in the map.
  std::optional<Entry> Find(int64_t dense_id) const;

 private:
  // Index of `dense_id` in the arrays below, or -1.
  int64_t IndexOf(int64_t dense_id) const;
  // Load's steps: the index of `kind` in kinds_ (added if new), the
  // columns ordered by dense id (`lines`: each entry's line, for the error
  // naming a repeated dense id), and by_original_.
  absl::StatusOr<uint8_t> KindIndex(const std::string& path, int64_t lineno,
                                    absl::string_view kind);
  absl::Status SortByDense(const std::string& path,
                           const std::vector<int64_t>& dense_ids,
                           const std::vector<int64_t>& lines);
  void IndexByOriginal();

  // Columns, one entry per mapped node: about 21 bytes a node (a 10M-node
  // job's map costs each shard ~0.2 GB, not the ~1.6 GB of two hash maps
  // of strings and vectors). dense_ is empty when the dense ids are
  // exactly 0..n-1 in order (what mnemo writes): the index is the id.
  std::vector<int64_t> dense_;     // sorted, when not 0..n-1
  std::vector<int64_t> original_;  // [i]: original id of entry i
  std::vector<uint8_t> kind_;      // [i]: index into kinds_
  std::vector<std::string> kinds_;
  std::vector<uint32_t> by_original_;  // entries ordered by (original, dense)
  int64_t dense_end_ = 0;
};

}  // namespace mnemo::services

#endif  // MNEMO_SERVICES_ID_MAP_H_
