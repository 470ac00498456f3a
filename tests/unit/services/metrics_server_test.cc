// The metrics endpoint's HTTP server over real sockets: slow, stalled and
// too many clients do not keep a scrape from being answered.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "services/metrics.h"
#include "util/status_matchers.h"

namespace mnemo::services {
namespace {

// A connected socket to 127.0.0.1:port that gives up reading after
// `read_timeout_s` (so that a test fails instead of hanging), or -1.
int Connect(int port, int read_timeout_s = 30) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  timeval tv{read_timeout_s, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// Everything the server sends until it closes (or the read times out).
std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, n);
  return out;
}

// One GET /metrics on a new connection: the whole answer, or "" when the
// connection failed.
std::string Scrape(int port) {
  int fd = Connect(port);
  if (fd < 0) return "";
  const std::string req = "GET /metrics HTTP/1.0\r\n\r\n";
  send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string out = ReadAll(fd);
  close(fd);
  return out;
}

class MetricsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_.Counter("mnemo_test_scrapes_total", "A test counter.")
        .Increment(3);
    ASSERT_THAT(registry_.Serve("127.0.0.1:0"), IsOk());
    port_ = registry_.port();
    ASSERT_GT(port_, 0);
  }
  MetricsRegistry registry_;
  int port_ = 0;
};

// A launcher's ports (its coordinator's and every shard's) are picked
// together and never repeat, however often the kernel would hand a closed
// port out again.
TEST(FreeTcpPortsTest, PortsPickedTogetherAreDistinct) {
  for (int round = 0; round < 50; ++round) {
    const std::vector<int> ports = FreeTcpPorts(9);
    ASSERT_EQ(ports.size(), 9u);
    std::vector<int> sorted = ports;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end())
        << "round " << round;
    for (int p : ports) EXPECT_GT(p, 0);
  }
}

TEST_F(MetricsServerTest, ScrapeAnswers) {
  const std::string out = Scrape(port_);
  EXPECT_THAT(out, ::testing::StartsWith("HTTP/1.0 200 OK"));
  EXPECT_THAT(out, ::testing::HasSubstr("mnemo_test_scrapes_total 3"));
}

// A slowloris client (a request trickled a byte at a time) stays connected
// while another client's scrape is answered. The server served one
// connection at a time: the scrape waited behind the trickle.
TEST_F(MetricsServerTest, ASlowClientDoesNotBlockAScrape) {
  const int slow = Connect(port_);
  ASSERT_GE(slow, 0);
  std::atomic<bool> stop{false}, ended{false};
  std::atomic<int> sent{0};
  std::thread trickle([&] {
    const std::string req = "GET /metrics HTTP/1.0\r\nX-Slow: ";
    for (size_t i = 0; !stop.load(); ++i) {
      const char c = i < req.size() ? req[i] : 'x';
      if (send(slow, &c, 1, MSG_NOSIGNAL) != 1) break;
      ++sent;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ended = true;
  });
  while (sent.load() < 3) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const std::string out = Scrape(port_);
  const bool slow_still_sending = !ended.load();
  stop = true;
  trickle.join();
  close(slow);
  EXPECT_THAT(out, ::testing::StartsWith("HTTP/1.0 200 OK"));
  EXPECT_THAT(out, ::testing::HasSubstr("mnemo_test_scrapes_total 3"));
  EXPECT_TRUE(slow_still_sending);
}

// A client that connects and says nothing is closed after the connection
// deadline, unanswered.
TEST_F(MetricsServerTest, ASilentClientIsClosed) {
  const int fd = Connect(port_, /*read_timeout_s=*/static_cast<int>(
                             kMetricsConnectionSeconds * 3));
  ASSERT_GE(fd, 0);
  const auto start = std::chrono::steady_clock::now();
  char c;
  const ssize_t n = recv(fd, &c, 1, 0);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  close(fd);
  EXPECT_EQ(n, 0) << "the server did not close the connection (waited "
                  << waited << " s)";
}

// More connections than the limit: the one past it is answered 503 at
// once; once the others go, scrapes are answered again.
TEST_F(MetricsServerTest, ConnectionsPastTheLimitAreRefused) {
  std::vector<int> idle;
  for (int i = 0; i < kMetricsMaxConnections; ++i) {
    idle.push_back(Connect(port_));
    ASSERT_GE(idle.back(), 0);
  }
  const int extra = Connect(port_);
  ASSERT_GE(extra, 0);
  EXPECT_THAT(ReadAll(extra),
              ::testing::StartsWith("HTTP/1.0 503 Service Unavailable"));
  close(extra);
  for (int fd : idle) close(fd);
  std::string out;
  for (int i = 0; i < 100 && out.find("200 OK") == std::string::npos; ++i) {
    out = Scrape(port_);
    if (out.find("200 OK") == std::string::npos) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  EXPECT_THAT(out, ::testing::HasSubstr("mnemo_test_scrapes_total 3"));
}

}  // namespace
}  // namespace mnemo::services
