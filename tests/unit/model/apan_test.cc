// APAN (trainer/model/apan.h): the mailbox it keeps (record layout, codec,
// delivery to endpoints and neighbours, the ring), its memory update
// against the equations, gradients to every parameter.
#include "trainer/model/apan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "memstore/node_state_store.h"
#include "trainer/batch/builder.h"
#include "trainer/data/event_log.h"
#include "trainer/data/neighbor_sampler.h"
#include "trainer/memory/record_codec.h"

namespace mnemo::model {
namespace {

// 6 nodes; events at t = 1..8 (no edge features).
data::EventLog TinyLog() {
  data::EventLog log;
  log.src = std::vector<int32_t>{0, 2, 0, 1, 4, 0, 2, 5};
  log.dst = std::vector<int32_t>{1, 3, 3, 2, 5, 1, 4, 3};
  log.t = std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8};
  log.num_nodes = 6;
  return log;
}

ModelOptions Small(int64_t mailbox, ApanMailbox mode = ApanMailbox::kMnemo) {
  ModelOptions o;
  o.apan_mailbox = mode;
  o.kind = ModelKind::kApan;
  o.memory_dim = 4;
  o.time_dim = 3;
  o.heads = 2;
  o.dropout = 0.0;
  o.mailbox = mailbox;
  return o;
}

struct Runner {
  explicit Runner(int64_t mailbox, ApanMailbox mode = ApanMailbox::kMnemo)
      : model(MakeModel(Small(mailbox, mode))) {
    state.Reset(model->layout(), log.num_nodes);
    builder.set_needs(model->needs());
  }
  ModelOutput Run(int64_t begin, int64_t end, std::vector<int32_t> negatives,
                  bool apply = true) {
    std::vector<int64_t> events;
    for (int64_t e = begin; e < end; ++e) events.push_back(e);
    builder.Build(events.data(), negatives.data(), events.size(), state,
                  &sampler, nullptr, &batch, &update);
    ModelOutput out = model->Forward(state, batch);
    if (apply) state.Apply(update, out.memory, out.rows);
    return out;
  }
  data::EventLog log = TinyLog();
  data::TemporalGraph graph{log};
  data::NeighborSampler sampler{&graph, 2};
  batch::BatchBuilder builder{&log, log.num_nodes};
  Model model;
  memory::NodeMemory state;
  batch::BatchTensors batch;
  batch::PositiveUpdate update;
};

TEST(ApanTest, LayoutIsMemoryAndARingOfMails) {
  Model model = MakeModel(Small(3));
  const memory::RecordLayout l = model->layout();
  EXPECT_EQ(l.memory_dim, 4);
  EXPECT_EQ(l.mail_dim, 8);  // [own memory, other's memory]
  EXPECT_EQ(l.mailbox_slots, 3);
  // memory + 3 mails + flags and time + 3 slot times (2 floats) + count
  EXPECT_EQ(l.RecordFloats(), 4 + 24 + 3 + 6 + 1);
  EXPECT_TRUE(model->needs().mail_to_neighbors);
  EXPECT_FALSE(model->needs().neighbors);
}

// Events 0 (0-1, t=1) and 1 (2-3, t=2), then 2 (0-3, t=3): the second
// batch's mail goes to 0 and 3 and to their neighbours before t=3 (1 and
// 2), each node one mail, written at its next ring slot.
TEST(ApanTest, MailsReachEndpointsAndTheirNeighbours) {
  torch::manual_seed(1);
  Runner r(/*mailbox=*/3);
  auto first = r.Run(0, 2, {4, 5});
  for (int u : {0, 1, 2, 3}) EXPECT_EQ(r.state.mails_received()[u], 1) << u;
  for (int u : {4, 5}) EXPECT_EQ(r.state.mails_received()[u], 0) << u;
  EXPECT_DOUBLE_EQ(r.state.slot_time()[0 * 3 + 0], 1.0);
  EXPECT_DOUBLE_EQ(r.state.slot_time()[3 * 3 + 0], 2.0);
  // Memory: the endpoints' updated rows, at their event times.
  EXPECT_DOUBLE_EQ(r.state.last_update()[2], 2.0);
  // Rows: the 6 targets; event 0's source is row 0, event 1's destination
  // row 2 + 1.
  EXPECT_TRUE(torch::equal(r.state.memory()[0], first.rows[0].detach()));
  EXPECT_TRUE(torch::equal(r.state.memory()[3], first.rows[3].detach()));
  EXPECT_EQ(r.state.memory()[4].abs().sum().item<double>(), 0);

  auto out = r.Run(2, 3, {5});
  // 0 and 3 (endpoints), 1 (0's neighbour), 2 (3's neighbour).
  for (int u : {0, 1, 2, 3}) {
    EXPECT_EQ(r.state.mails_received()[u], 2) << u;
    EXPECT_DOUBLE_EQ(r.state.slot_time()[u * 3 + 1], 3.0) << u;
  }
  // Node 1 holds 0's mail of event 2: [0's row, 3's row]; node 0 its own.
  const batch::BatchTensors& b = r.batch;
  const int64_t src_row = 0;  // event 2's source row (its target row)
  ASSERT_EQ(b.query_slot.size(0), 3 * b.batch_size);
  torch::Tensor h = out.rows.detach();
  torch::Tensor mail1 = r.state.mail()[1].view({3, 8})[1];
  EXPECT_TRUE(torch::allclose(mail1.narrow(0, 0, 4), h[src_row]));
  EXPECT_TRUE(torch::allclose(mail1.narrow(0, 4, 4), h[src_row + 1]));
  torch::Tensor mail3 = r.state.mail()[3].view({3, 8})[1];
  EXPECT_TRUE(torch::allclose(mail3.narrow(0, 0, 4), h[src_row + 1]));
  // Only the endpoints' memory moves.
  EXPECT_DOUBLE_EQ(r.state.last_update()[1], 1.0);
  EXPECT_DOUBLE_EQ(r.state.last_update()[0], 3.0);
}

// The latest event that reaches a node wins, and the ring wraps: after
// k + 1 batches the oldest slot holds the newest mail.
TEST(ApanTest, TheRingKeepsTheLastMails) {
  torch::manual_seed(2);
  Runner r(/*mailbox=*/2);
  r.Run(0, 1, {4});  // 0-1 at 1
  r.Run(2, 3, {4});  // 0-3 at 3
  r.Run(5, 6, {4});  // 0-1 at 6
  EXPECT_EQ(r.state.mails_received()[0], 3);
  EXPECT_DOUBLE_EQ(r.state.slot_time()[0 * 2 + 0], 6.0);  // wrapped
  EXPECT_DOUBLE_EQ(r.state.slot_time()[0 * 2 + 1], 3.0);
  // A batch where node 3 is both a neighbour (of 0 in event 5? no: of 2
  // in event 6) and an endpoint (event 7, later): one mail, event 7's.
  const int64_t before = r.state.mails_received()[3];
  r.Run(6, 8, {0, 1});
  EXPECT_EQ(r.state.mails_received()[3], before + 1);
  EXPECT_DOUBLE_EQ(r.state.mail_time()[3], 8.0);
  // The query rows' mailboxes: filled slots only.
  EXPECT_EQ(r.batch.mailbox_mask.sizes(), (std::vector<int64_t>{3 * 2, 2}));
}

// --apan-mailbox tgl reads the mailbox as TGL does: every slot (an empty one
// a zero mail at time 0), and a node's mail and memory the last listed in
// TGL's order (sources, destinations, then the neighbours of each source and
// of each destination), where mnemo takes the latest event's.
TEST(ApanTest, TglMailboxAttendsEverySlotAndKeepsTheLastListed) {
  for (ApanMailbox mode : {ApanMailbox::kMnemo, ApanMailbox::kTgl}) {
    SCOPED_TRACE(std::string(ApanMailboxName(mode)));
    const bool tgl = mode == ApanMailbox::kTgl;
    torch::manual_seed(7);
    Runner r(/*mailbox=*/3, mode);
    EXPECT_EQ(r.model->needs().tgl_mailbox, tgl);
    // Events 0-3 (0-1 at 1, 2-3 at 2, 0-3 at 3, 1-2 at 4) in one batch.
    auto first = r.Run(0, 4, {4, 5, 4, 5});
    // Empty mailboxes: TGL attends over the k zero mails, at dt = t.
    const batch::BatchTensors& b = r.batch;
    EXPECT_EQ(b.mailbox_mask.all().item<bool>(), tgl);
    EXPECT_EQ(b.mailbox_mask.any().item<bool>(), tgl);
    if (tgl) {
      EXPECT_FLOAT_EQ(b.mailbox_dt[3][0].item<float>(), 4.0f);  // e3 source
    }
    EXPECT_TRUE(torch::isfinite(first.rows).all().item<bool>());
    // Node 1: source of event 3 (t 4), destination of event 0 (t 1),
    // destinations listed after sources: TGL's memory is event 0's.
    EXPECT_DOUBLE_EQ(r.state.last_update()[1], tgl ? 1.0 : 4.0);
    torch::Tensor h = first.rows.detach();
    EXPECT_TRUE(torch::equal(r.state.memory()[1], h[tgl ? 4 + 0 : 3]));
    // Node 0: source of events 0 and 2: event 2's in both.
    EXPECT_DOUBLE_EQ(r.state.last_update()[0], 3.0);

    // Events 2 (0-3 at 3) and 3 (1-2 at 4): node 1's own mail (event 3)
    // against the mail of its neighbour 0 (event 2), node 2's own (event 3)
    // against its neighbour 3's (event 2). Neighbours' mails are listed
    // last: TGL keeps them.
    torch::manual_seed(8);
    Runner s(/*mailbox=*/3, mode);
    auto out = s.Run(2, 4, {4, 5});
    torch::Tensor g = out.rows.detach();
    // Rows: sources 0 (event 2), 1 (event 3); destinations 3, 2.
    EXPECT_DOUBLE_EQ(s.state.mail_time()[1], tgl ? 3.0 : 4.0);
    EXPECT_DOUBLE_EQ(s.state.mail_time()[2], tgl ? 3.0 : 4.0);
    torch::Tensor mail1 = s.state.mail()[1].view({3, 8})[0];
    EXPECT_TRUE(torch::equal(mail1.narrow(0, 0, 4), tgl ? g[0] : g[1]));
    EXPECT_TRUE(torch::equal(mail1.narrow(0, 4, 4), tgl ? g[2] : g[3]));
    torch::Tensor mail2 = s.state.mail()[2].view({3, 8})[0];
    EXPECT_TRUE(torch::equal(mail2.narrow(0, 0, 4), tgl ? g[2] : g[3]));
    // Nodes 0 and 3: their neighbours' mails of event 3 (the latest too).
    EXPECT_DOUBLE_EQ(s.state.mail_time()[0], 4.0);
    EXPECT_DOUBLE_EQ(s.state.mail_time()[3], 4.0);
    for (int u : {0, 1, 2, 3}) EXPECT_EQ(s.state.mails_received()[u], 1) << u;
  }
}

TEST(ApanTest, TglMailboxIsApans) {
  ModelOptions o = Small(3, ApanMailbox::kTgl);
  EXPECT_TRUE(ValidateModelOptions(o).ok());
  o.kind = ModelKind::kTgn;
  o.memory_dim = o.time_dim = o.embedding_dim = 4;
  absl::Status s = ValidateModelOptions(o);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("--apan-mailbox tgl is for --model apan"),
            std::string::npos)
      << s;
  EXPECT_FALSE(ParseApanMailbox("masked").ok());
  EXPECT_EQ(*ParseApanMailbox("tgl"), ApanMailbox::kTgl);
  EXPECT_EQ(ApanMailboxName(ApanMailbox::kMnemo), "mnemo");
}

// Replayed positives (DepTGL, full-cache: events that update memory but are
// not predicted) get query rows of their own after the targets, and their
// endpoints' memory and mails come from those rows.
TEST(ApanTest, ReplayedPositivesHaveRowsOfTheirOwn) {
  torch::manual_seed(6);
  Runner r(/*mailbox=*/3);
  std::vector<int64_t> targets = {2};
  std::vector<int32_t> negatives = {5};
  std::vector<int64_t> positives = {0, 1, 2};
  r.builder.Prepare(targets.data(), negatives.data(), 1, positives.data(), 3,
                    &r.sampler);
  r.builder.Finish(r.state, nullptr, &r.batch, &r.update);
  ASSERT_EQ(r.batch.query_slot.size(0), 3 + 2 * 3);
  ModelOutput out = r.model->Forward(r.state, r.batch);
  r.state.Apply(r.update, out.memory, out.rows);
  // Node 2: destination of no event here, source of event 1 (row 3 + 2).
  EXPECT_TRUE(torch::equal(r.state.memory()[2], out.rows[5].detach()));
  EXPECT_DOUBLE_EQ(r.state.last_update()[2], 2.0);
  // Node 3: destination of event 2 (row 3 + 2 * 2 + 1), its latest.
  EXPECT_TRUE(torch::equal(r.state.memory()[3], out.rows[8].detach()));
  EXPECT_DOUBLE_EQ(r.state.last_update()[3], 3.0);
}

TEST(ApanTest, RecordsRoundTrip) {
  torch::manual_seed(3);
  Runner r(/*mailbox=*/3);
  r.Run(0, 4, {5, 4, 5, 0});
  r.Run(4, 8, {0, 1, 2, 3});
  std::vector<int64_t> nodes = {0, 1, 2, 3, 4, 5};
  memory::StateVersions v{8, 1};
  std::vector<float> records;
  std::vector<uint64_t> versions;
  std::vector<double> times;
  memory::PackStates(
      r.state, nodes, v, [](int64_t) { return true; }, {}, &records, &versions,
      &times);
  ASSERT_EQ(records.size(), nodes.size() * r.model->layout().RecordFloats());
  memstore::PulledStates pulled;
  pulled.states = records;
  pulled.version = versions;
  pulled.time = times;
  memory::NodeMemory copy;
  copy.Reset(r.model->layout(), 6);
  memory::UnpackStates(pulled, nodes, v, &copy);
  EXPECT_TRUE(torch::equal(copy.memory(), r.state.memory()));
  EXPECT_TRUE(torch::equal(copy.mail(), r.state.mail()));
  EXPECT_EQ(copy.mails_received(), r.state.mails_received());
  EXPECT_EQ(copy.slot_time(), r.state.slot_time());
  EXPECT_EQ(copy.last_update(), r.state.last_update());
  EXPECT_EQ(copy.last_event(), r.state.last_event());
}

// The memory update written out: q = W_q m; k, v = W_{k,v} [mail,
// cos(w dt + b)] per filled slot; LeakyReLU_0.2 scores per head; softmax;
// out = ReLU(W_mlp LayerNorm(sum att v + m)).
TEST(ApanTest, MemoryUpdateIsItsEquations) {
  torch::manual_seed(4);
  auto model = std::make_shared<ApanImpl>(Small(3));
  model->eval();
  const int64_t r = 2, k = 3, d = 4, mail = 8, heads = 2, dh = 2;
  torch::Tensor mem = torch::randn({r, d});
  torch::Tensor mails = torch::randn({r, k, mail});
  torch::Tensor dt = torch::rand({r, k}) * 5;
  torch::Tensor mask =
      torch::tensor({1, 1, 0, 0, 0, 0}, torch::kBool).view({r, k});
  torch::Tensor got = model->AttendMailbox(mem, mails, dt, mask);
  torch::NoGradGuard g;
  std::map<std::string, torch::Tensor> p;
  for (const auto& item : model->named_parameters())
    p[item.key()] = item.value();
  auto lin = [&](const torch::Tensor& x, const std::string& n) {
    return x.matmul(p.at(n + ".weight").t()) + p.at(n + ".bias");
  };
  for (int64_t i = 0; i < r; ++i) {
    torch::Tensor q = lin(mem[i].unsqueeze(0), "w_q")[0];
    torch::Tensor agg = torch::zeros({d});
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<double> s;
      std::vector<torch::Tensor> vals;
      for (int64_t j = 0; j < k; ++j) {
        if (!mask[i][j].item<bool>()) continue;
        torch::Tensor te =
            torch::cos(lin(dt[i][j].view({1, 1}), "time_encoder"))[0];
        torch::Tensor in = torch::cat({mails[i][j], te}).unsqueeze(0);
        torch::Tensor key = lin(in, "w_k")[0], val = lin(in, "w_v")[0];
        double x = (q.narrow(0, h * dh, dh) * key.narrow(0, h * dh, dh))
                       .sum()
                       .item<double>();
        s.push_back(x > 0 ? x : 0.2 * x);
        vals.push_back(val.narrow(0, h * dh, dh));
      }
      double z = 0;
      for (double x : s) z += std::exp(x);
      for (size_t j = 0; j < s.size(); ++j) {
        agg.narrow(0, h * dh, dh) += std::exp(s[j]) / z * vals[j];
      }
    }
    torch::Tensor x = agg + mem[i];
    torch::Tensor norm = (x - x.mean()) / torch::sqrt(x.var(false) + 1e-5) *
                             p.at("update_norm.weight") +
                         p.at("update_norm.bias");
    torch::Tensor want = torch::relu(lin(norm.unsqueeze(0), "mlp")[0]);
    EXPECT_TRUE(torch::allclose(got[i], want, 1e-4, 1e-5))
        << i << got[i] << want;
  }
}

TEST(ApanTest, GradientsReachEveryParameter) {
  torch::manual_seed(5);
  Runner r(/*mailbox=*/3);
  // Two batches leave two mails on 0..3 (one per node and batch), so the
  // attention over them is not trivial.
  r.Run(0, 2, {5, 4});
  r.Run(2, 4, {5, 0});
  auto out = r.Run(4, 8, {0, 1, 2, 3}, /*apply=*/false);
  Loss(out).backward();
  for (const auto& p : r.model->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0) << p.key();
  }
}

}  // namespace
}  // namespace mnemo::model
