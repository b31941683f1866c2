// tests/host/test_launch_plan.cpp — phase 5's `--launch auto` rule (phase5_batched/launch_plan.h): for
// W1's kind the pipelined kernel where it fuses the first layer's update, else the persistent kernel
// with one first-layer unit a block; for W2's kind the cluster kernel where the model fits one cluster,
// the grid kernel while its plan holds one 16-unit tile a hidden layer a block on at most half the SMs;
// the graph path for everything else.
#include <doctest/doctest.h>

#include "../../phase5_batched/launch_plan.h"

TEST_CASE("launch auto: the rule from the rungs' plans") {
  using nb::LaunchFacts;
  CHECK(nb::choose_launch(LaunchFacts{false, false, 0, true, true}).launch == "pipelined");  // W1, batch 32
  CHECK(nb::choose_launch(LaunchFacts{false, false, 0, false, true}).launch == "persistent");  // W1, batch 64
  CHECK(nb::choose_launch(LaunchFacts{false, false, 0, false, false}).launch == "graph");     // W1, batch 128
  CHECK(nb::choose_launch(LaunchFacts{false, true, 16}).launch == "graph");  // fp32 beyond the persistent plans
  CHECK(nb::choose_launch(LaunchFacts{true, true, 16}).launch == "cluster");  // W2 h = 128
  CHECK(nb::choose_launch(LaunchFacts{true, false, 16, false, false, 16, 132}).launch == "grid");   // W2 h = 256
  CHECK(nb::choose_launch(LaunchFacts{true, false, 16, false, false, 64, 132}).launch == "grid");   // W2 h = 1,024
  CHECK(nb::choose_launch(LaunchFacts{true, false, 16, false, false, 128, 132}).launch == "graph");  // W2 h = 2,048
  CHECK(nb::choose_launch(LaunchFacts{true, false, 16, false, false, 128, 132}).why.find("128 blocks") != std::string::npos);
  CHECK(nb::choose_launch(LaunchFacts{true, false, 32}).launch == "graph");   // W2 h = 4,096
  CHECK(nb::choose_launch(LaunchFacts{true, false, 0}).launch == "graph");    // refused by both
  CHECK(nb::choose_launch(LaunchFacts{true, false, 64}).why.find("64 units") != std::string::npos);
}
