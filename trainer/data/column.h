// Column<T>: one per-event column of an EventLog. It either owns its values
// (a std::vector) or views values that live elsewhere: a read-only mapping
// of a columnar event file (event_file.h), which every process on a host
// maps from the same page cache. Reads are the same either way; a mutation
// first copies a viewed column into owned storage (copy on write), so a
// mapping is never written through.
#ifndef MNEMO_TRAINER_DATA_COLUMN_H_
#define MNEMO_TRAINER_DATA_COLUMN_H_

#include <cstddef>
#include <initializer_list>
#include <utility>
#include <vector>

namespace mnemo::data {

template <typename T>
class Column {
 public:
  using value_type = T;

  Column() = default;
  Column(std::initializer_list<T> values) : owned_(values) { Sync(); }
  Column(std::vector<T> values) : owned_(std::move(values)) { Sync(); }
  Column(const Column& o)
      : owned_(o.owned_), view_(o.view_), view_size_(o.view_size_) {
    Sync();
  }
  Column(Column&& o) noexcept
      : owned_(std::move(o.owned_)), view_(o.view_), view_size_(o.view_size_) {
    Sync();
    o.Reset();
  }
  Column& operator=(const Column& o) {
    if (this != &o) {
      owned_ = o.owned_;
      view_ = o.view_;
      view_size_ = o.view_size_;
      Sync();
    }
    return *this;
  }
  Column& operator=(Column&& o) noexcept {
    if (this != &o) {
      owned_ = std::move(o.owned_);
      view_ = o.view_;
      view_size_ = o.view_size_;
      Sync();
      o.Reset();
    }
    return *this;
  }
  Column& operator=(std::initializer_list<T> values) {
    return *this = std::vector<T>(values);
  }
  Column& operator=(std::vector<T> values) {
    owned_ = std::move(values);
    view_ = nullptr;
    view_size_ = 0;
    Sync();
    return *this;
  }

  // A column of the `n` values at `p`, which it does not own: they must
  // stay valid (and unchanged) as long as any copy of the column reads
  // them.
  static Column View(const T* p, size_t n) {
    Column c;
    c.view_ = p;
    c.view_size_ = n;
    c.Sync();
    return c;
  }
  // Whether the values are viewed (not owned).
  bool viewed() const { return view_ != nullptr; }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const T* data() const { return data_; }
  const T& operator[](size_t i) const { return data_[i]; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }
  const T& front() const { return data_[0]; }
  const T& back() const { return data_[size_ - 1]; }

  // Mutation: owned storage (a viewed column is copied first).
  T* mutable_data() {
    Own();
    return owned_.data();
  }
  void set(size_t i, const T& v) { mutable_data()[i] = v; }
  void push_back(const T& v) {
    Own();
    owned_.push_back(v);
    Sync();
  }
  void resize(size_t n) {
    Own();
    owned_.resize(n);
    Sync();
  }
  void resize(size_t n, const T& v) {
    Own();
    owned_.resize(n, v);
    Sync();
  }
  void reserve(size_t n) {
    Own();
    owned_.reserve(n);
    Sync();
  }
  template <typename It>
  void assign(It first, It last) {
    owned_.assign(first, last);
    view_ = nullptr;
    view_size_ = 0;
    Sync();
  }
  void assign(size_t n, const T& v) {
    owned_.assign(n, v);
    view_ = nullptr;
    view_size_ = 0;
    Sync();
  }
  void clear() {
    owned_.clear();
    view_ = nullptr;
    view_size_ = 0;
    Sync();
  }
  // The values as a vector (a copy).
  std::vector<T> ToVector() const { return std::vector<T>(begin(), end()); }

  friend bool operator==(const Column& a, const Column& b) {
    if (a.size_ != b.size_) return false;
    for (size_t i = 0; i < a.size_; ++i) {
      if (!(a.data_[i] == b.data_[i])) return false;
    }
    return true;
  }
  friend bool operator!=(const Column& a, const Column& b) { return !(a == b); }

 private:
  void Own() {
    if (view_ != nullptr) {
      owned_.assign(view_, view_ + view_size_);
      view_ = nullptr;
      view_size_ = 0;
      Sync();
    }
  }
  void Sync() {
    if (view_ != nullptr) {
      data_ = view_;
      size_ = view_size_;
    } else {
      data_ = owned_.data();
      size_ = owned_.size();
    }
  }
  void Reset() {
    owned_.clear();
    view_ = nullptr;
    view_size_ = 0;
    Sync();
  }

  std::vector<T> owned_;
  const T* view_ = nullptr;
  size_t view_size_ = 0;
  const T* data_ = nullptr;  // view_ or owned_.data()
  size_t size_ = 0;
};

}  // namespace mnemo::data

#endif  // MNEMO_TRAINER_DATA_COLUMN_H_
