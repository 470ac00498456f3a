#include "services/metrics.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <prometheus/text_serializer.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <list>
#include <memory>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "services/grpc_util.h"

namespace mnemo::services {

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> b;
  for (int i = 0; i < count; ++i, start *= factor) b.push_back(start);
  return b;
}

std::vector<double> LatencyBucketsSeconds() {
  return ExponentialBuckets(50e-6, 2, 19);
}

std::vector<int> FreeTcpPorts(int n) {
  // Every socket stays bound until all are picked: the kernel hands out a
  // port again once it is closed, so ports picked one after another can
  // repeat (a launcher gave its coordinator and a shard the same one).
  std::vector<int> fds, ports;
  for (int i = 0; i < n; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) break;
    fds.push_back(fd);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      break;
    }
    ports.push_back(ntohs(a.sin_port));
  }
  for (int fd : fds) close(fd);
  if (static_cast<int>(ports.size()) < n) return {};
  return ports;
}

int FreeTcpPort() {
  const std::vector<int> ports = FreeTcpPorts(1);
  return ports.empty() ? -1 : ports[0];
}

MetricsRegistry::MetricsRegistry()
    : registry_(std::make_shared<prometheus::Registry>()) {}

// A minimal HTTP/1.0 server for GET /metrics. (prometheus-cpp's Exposer
// runs civetweb, whose threads ask for a fixed small stack that glibc
// refuses in a process with LibTorch's and OpenBLAS's static TLS.)
//
// Each connection has its own thread, so a slow or stalled client (one
// sending a byte a second, or never reading the answer) delays nobody
// else (metrics.h kMetricsMaxConnections, kMetricsConnectionSeconds).
class MetricsRegistry::HttpServer {
 public:
  static constexpr int kMaxConnections = kMetricsMaxConnections;
  static constexpr double kConnectionSeconds = kMetricsConnectionSeconds;
  static constexpr size_t kMaxRequestBytes = 16384;

  HttpServer(int fd, int port, const MetricsRegistry* registry)
      : fd_(fd), port_(port), registry_(registry) {
    if (::pipe2(wake_, O_CLOEXEC) != 0) wake_[0] = wake_[1] = -1;
    thread_ = std::thread([this] { Loop(); });
  }
  ~HttpServer() {
    // One byte, never read: every poll() on wake_[0] sees it from now on,
    // the accept loop's and each connection's.
    stop_ = true;  // for the accept loop should the pipe have failed
    char c = 0;
    (void)!::write(wake_[1], &c, 1);
    thread_.join();
    for (auto& conn : conns_) conn->thread.join();
    ::close(fd_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }
  int port() const { return port_; }

 private:
  struct Connection {
    std::thread thread;
    std::atomic<bool> done{false};
  };
  using Clock = std::chrono::steady_clock;

  void Loop() {
    for (;;) {
      pollfd p[2] = {{fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      if (::poll(p, 2, 1000) < 0 && errno != EINTR) return;
      if (p[1].revents || stop_.load()) return;
      Reap();
      if (!(p[0].revents & POLLIN)) continue;
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (c < 0) continue;
      if (static_cast<int>(conns_.size()) >= kMaxConnections) {
        // Busy: say so without waiting for the client, and close.
        static constexpr char kBusy[] =
            "HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\n"
            "Connection: close\r\n\r\n";
        (void)!::send(c, kBusy, sizeof(kBusy) - 1, MSG_NOSIGNAL);
        ::close(c);
        continue;
      }
      auto conn = std::make_unique<Connection>();
      Connection* raw = conn.get();
      conn->thread = std::thread([this, c, raw] {
        Serve(c, Clock::now() + std::chrono::milliseconds(static_cast<int>(
                                    kConnectionSeconds * 1000)));
        ::close(c);
        raw->done = true;
      });
      conns_.push_back(std::move(conn));
    }
  }
  // Joins the threads of finished connections.
  void Reap() {
    for (auto it = conns_.begin(); it != conns_.end();) {
      if ((*it)->done.load()) {
        (*it)->thread.join();
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // Waits until `c` is ready for `events`; false at the deadline, on
  // shutdown, or when the connection broke.
  bool Wait(int c, short events, Clock::time_point deadline) const {
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - Clock::now());
      if (left.count() <= 0) return false;
      pollfd p[2] = {{c, events, 0}, {wake_[0], POLLIN, 0}};
      const int n = ::poll(p, 2, static_cast<int>(left.count()));
      if (n < 0 && errno != EINTR) return false;
      if (p[1].revents) return false;
      if (p[0].revents & (events | POLLERR | POLLHUP)) return true;
    }
  }
  void Serve(int c, Clock::time_point deadline) const {
    std::string req;
    char buf[2048];
    while (req.find("\r\n\r\n") == std::string::npos &&
           req.size() < kMaxRequestBytes) {
      if (!Wait(c, POLLIN, deadline)) return;  // too slow: no answer
      const ssize_t n = ::recv(c, buf, sizeof(buf), 0);
      if (n == 0) break;  // the client sent all it will
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
          continue;
        }
        return;
      }
      req.append(buf, n);
    }
    std::string status = "200 OK", type = "text/plain; version=0.0.4", body;
    if (req.rfind("GET /metrics", 0) == 0) {
      body = registry_->TextExposition();
    } else if (req.rfind("GET ", 0) == 0) {
      status = "404 Not Found";
      body = "see /metrics\n";
    } else {
      status = "405 Method Not Allowed";
    }
    const std::string out =
        absl::StrCat("HTTP/1.0 ", status, "\r\nContent-Type: ", type,
                     "\r\nContent-Length: ", body.size(),
                     "\r\nConnection: close\r\n\r\n", body);
    for (size_t off = 0; off < out.size();) {
      const ssize_t n =
          ::send(c, out.data() + off, out.size() - off, MSG_NOSIGNAL);
      if (n > 0) {
        off += n;
      } else if (n < 0 &&
                 (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        if (!Wait(c, POLLOUT, deadline)) return;  // a client not reading
      } else {
        return;
      }
    }
  }

  const int fd_, port_;
  const MetricsRegistry* registry_;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::list<std::unique_ptr<Connection>> conns_;  // the accept loop's
};

MetricsRegistry::~MetricsRegistry() {
  std::unique_ptr<HttpServer> http;
  {
    absl::MutexLock l(&mu_);
    http = std::move(http_);
  }
  http.reset();  // stop serving before the registry goes
}

absl::Status MetricsRegistry::Serve(const std::string& address) {
  absl::MutexLock l(&mu_);
  if (http_) return absl::FailedPreconditionError("metrics already served");
  const std::string addr = NormalizeAddress(address);
  const size_t colon = addr.rfind(':');
  int port = -1;
  std::string host = colon == std::string::npos ? "" : addr.substr(0, colon);
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(addr.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", address, "' is not host:port"));
  }
  if (host == "localhost") host = "127.0.0.1";
  if (host.empty() || host == "*") host = "0.0.0.0";
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics host '", host, "' is not an IPv4 address"));
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  socklen_t len = sizeof(a);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      listen(fd, 64) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    const std::string err = std::strerror(errno);
    if (fd >= 0) close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", addr, ": ", err));
  }
  http_ = std::make_unique<HttpServer>(fd, ntohs(a.sin_port), this);
  return absl::OkStatus();
}

int MetricsRegistry::port() const {
  absl::MutexLock l(&mu_);
  return http_ ? http_->port() : 0;
}

prometheus::Counter& MetricsRegistry::Counter(const std::string& name,
                                              const std::string& help,
                                              const MetricLabels& labels) {
  absl::MutexLock l(&mu_);
  auto& fam = counters_[name];
  if (!fam) {
    fam =
        &prometheus::BuildCounter().Name(name).Help(help).Register(*registry_);
  }
  return fam->Add(labels);
}

prometheus::Gauge& MetricsRegistry::Gauge(const std::string& name,
                                          const std::string& help,
                                          const MetricLabels& labels) {
  absl::MutexLock l(&mu_);
  auto& fam = gauges_[name];
  if (!fam) {
    fam = &prometheus::BuildGauge().Name(name).Help(help).Register(*registry_);
  }
  return fam->Add(labels);
}

prometheus::Histogram& MetricsRegistry::Histogram(
    const std::string& name, const std::string& help,
    const MetricLabels& labels, const std::vector<double>& buckets) {
  absl::MutexLock l(&mu_);
  auto& fam = histograms_[name];
  if (!fam) {
    fam = &prometheus::BuildHistogram().Name(name).Help(help).Register(
        *registry_);
  }
  return fam->Add(labels, buckets);
}

void MetricsRegistry::AddCollectable(
    std::shared_ptr<prometheus::Collectable> collectable) {
  absl::MutexLock l(&mu_);
  collectables_.push_back(collectable);
}

std::string MetricsRegistry::TextExposition() const {
  std::vector<prometheus::MetricFamily> all = registry_->Collect();
  {
    absl::MutexLock l(&mu_);
    for (const auto& c : collectables_) {
      auto more = c->Collect();
      all.insert(all.end(), more.begin(), more.end());
    }
  }
  return prometheus::TextSerializer().Serialize(all);
}

namespace {
prometheus::MetricFamily OneValue(const std::string& name,
                                  const std::string& help,
                                  prometheus::MetricType type, double value) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  prometheus::ClientMetric m;
  if (type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(m);
  return f;
}
}  // namespace

prometheus::MetricFamily GaugeFamily(const std::string& name,
                                     const std::string& help, double value) {
  return OneValue(name, help, prometheus::MetricType::Gauge, value);
}

prometheus::MetricFamily CounterFamily(const std::string& name,
                                       const std::string& help, double value) {
  return OneValue(name, help, prometheus::MetricType::Counter, value);
}

}  // namespace mnemo::services
