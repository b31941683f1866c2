// tests/host/test_launch_plan.cpp — phase 5's `--launch auto` rule (phase5_batched/launch_plan.h): the
// graph path for what the one-launch W2 kernels cannot run, the cluster kernel where the model fits one
// cluster, the grid kernel while its plan holds one 16-unit tile a hidden layer a block, the graph path
// past that.
#include <doctest/doctest.h>

#include "../../phase5_batched/launch_plan.h"

TEST_CASE("launch auto: the rule from the rungs' plans") {
  using nb::LaunchFacts;
  CHECK(nb::choose_launch(LaunchFacts{false, true, 16}).launch == "graph");  // W1: fp32, Adam, dropout
  CHECK(nb::choose_launch(LaunchFacts{true, true, 16}).launch == "cluster");  // W2 h = 128
  CHECK(nb::choose_launch(LaunchFacts{true, false, 16}).launch == "grid");    // W2 h = 256 ... 2,048
  CHECK(nb::choose_launch(LaunchFacts{true, false, 32}).launch == "graph");   // W2 h = 4,096
  CHECK(nb::choose_launch(LaunchFacts{true, false, 0}).launch == "graph");    // refused by both
  CHECK(nb::choose_launch(LaunchFacts{true, false, 64}).why.find("64 units") != std::string::npos);
}
