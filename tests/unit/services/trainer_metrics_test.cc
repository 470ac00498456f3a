#include "services/trainer_metrics.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/proc.h"

namespace mnemo::services {
namespace {

using ::testing::HasSubstr;

TEST(TrainerMetricsTest, CallbacksFillTheSeriesAndStillReachTheCaller) {
  MetricsRegistry registry;
  TrainerMetrics metrics(&registry, 1);
  std::vector<std::string> seen;
  runtime::TrainCallbacks base;
  base.batch = [&](const runtime::TrainCallbacks::Batch&) {
    seen.push_back("batch");
  };
  base.epoch = [&](const runtime::EpochResult&) { seen.push_back("epoch"); };
  runtime::TrainCallbacks cb = metrics.Wrap(base);
  ASSERT_TRUE(cb.batch && cb.epoch && cb.test);

  runtime::TrainCallbacks::Batch b;
  b.epoch = 1;
  b.target_events = 300;
  b.loss = 0.75;
  b.grad_norm = 2.5;
  b.seconds = 0.02;
  b.store.states_pulled = 10;
  b.store.bytes_pulled = 4000;
  cb.batch(b);
  b.store.states_pulled = 25;  // running totals: +15
  b.store.bytes_pulled = 10000;
  b.store.states_pushed = 7;
  b.store.bytes_pushed = 2800;
  b.pipeline.state_wait_seconds = 0.25;
  b.pipeline.parameter_wait_seconds = 0.5;
  b.pipeline.states_sent = 40;
  b.pipeline.bytes_sent = 16000;
  cb.batch(b);
  runtime::EpochResult e;
  e.epoch = 1;
  e.train_loss = 0.8;
  e.val_ap = 0.9;
  e.seconds = 12;
  cb.epoch(e);
  runtime::TestResult t;
  t.ap = 0.95;
  cb.test(t);  // no test callback in `base`: fine

  EXPECT_EQ(seen, (std::vector<std::string>{"batch", "batch", "epoch"}));
  const std::string text = registry.TextExposition();
  EXPECT_THAT(text, HasSubstr("mnemo_trainer_events_total{rank=\"1\"} 600"));
  EXPECT_THAT(text, HasSubstr("mnemo_trainer_batches_total{rank=\"1\"} 2"));
  EXPECT_THAT(text, HasSubstr("mnemo_trainer_states_total{direction=\"pull\","
                              "rank=\"1\"} 25"));
  EXPECT_THAT(text, HasSubstr("mnemo_trainer_state_bytes_total{direction="
                              "\"push\",rank=\"1\"} 2800"));
  EXPECT_THAT(text, HasSubstr("mnemo_trainer_val_ap{rank=\"1\"} 0.9"));
  EXPECT_THAT(text, HasSubstr("mnemo_trainer_train_loss{rank=\"1\"} 0.8"));
  EXPECT_THAT(text, HasSubstr("mnemo_trainer_test_ap{rank=\"1\"} 0.95"));
  EXPECT_THAT(text,
              HasSubstr("mnemo_trainer_batch_seconds_count{rank=\"1\"} 2"));
  EXPECT_THAT(text, HasSubstr("mnemo_trainer_grad_norm{rank=\"1\"} 2.5"));
  EXPECT_THAT(text, HasSubstr("mnemo_trainer_pipeline_bubble_seconds_total{"
                              "for=\"parameters\",rank=\"1\"} 0.5"));
  EXPECT_THAT(text, HasSubstr("mnemo_trainer_pipeline_bubble_seconds_total{"
                              "for=\"states\",rank=\"1\"} 0.25"));
  EXPECT_THAT(text, HasSubstr("mnemo_trainer_pipeline_handoff_bytes_total{"
                              "rank=\"1\"} 16000"));
}

TEST(TrainerMetricsTest, CountersNeverGoBackwards) {
  MetricsRegistry registry;
  TrainerMetrics metrics(&registry, 0);
  runtime::TrainCallbacks cb = metrics.Wrap({});
  runtime::TrainCallbacks::Batch b;
  b.store.bytes_pulled = 5000;
  cb.batch(b);
  b.store.bytes_pulled = 1000;  // a restarted total
  cb.batch(b);
  b.store.bytes_pulled = 1500;
  cb.batch(b);
  EXPECT_THAT(registry.TextExposition(),
              HasSubstr("mnemo_trainer_state_bytes_total{direction=\"pull\","
                        "rank=\"0\"} 5500"));
}

TEST(IsLoopbackHostTest, NamesAndAddresses) {
  EXPECT_TRUE(IsLoopbackHost("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackHost("127.1.2.3"));
  EXPECT_TRUE(IsLoopbackHost("localhost"));
  EXPECT_TRUE(IsLoopbackHost("::1"));
  EXPECT_FALSE(IsLoopbackHost("10.0.0.4"));
  EXPECT_FALSE(IsLoopbackHost("coordinator"));
  EXPECT_FALSE(IsLoopbackHost("1270.0.0.1"));
}

}  // namespace
}  // namespace mnemo::services
