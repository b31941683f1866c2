// tests/host/test_cli.cpp — the shared command-line parser (common/cli.h): good inputs give typed
// values; every class of bad input gives exit code 2 and a one-line message naming the flag.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli.h"
#include "errors.h"

namespace {

struct Parsed {
  bool threw = false;
  int code = 0;
  std::string msg;
  bool result = false;
};

Parsed run_parse(nb::Cli& cli, std::vector<std::string> args) {
  args.insert(args.begin(), "prog");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  Parsed p;
  try {
    p.result = cli.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const nb::Error& e) {
    p.threw = true;
    p.code = e.code;
    p.msg = e.what();
  }
  return p;
}

// A parser with one flag of every kind, like a phase would build.
struct Fixture {
  int64_t n = 5000000;
  int epochs = 200;
  double lr = 0.01;
  double shift = -1.5;
  std::string impl = "fp32";
  bool fast = false;
  std::vector<int> layers{784, 128, 10};
  nb::CommonOptions common;
  nb::Cli cli{"phase_test", "A parser under test."};
  Fixture() {
    cli.add_int("--n", &n, "number of points", 1);
    cli.add_int("--epochs", &epochs, "epochs", 1, 100000);
    cli.add_double("--lr", &lr, "learning rate");
    cli.add_double("--shift", &shift, "an offset that may be negative", false, -10, 10);
    cli.add_string("--impl", &impl, "precision", {"fp32", "fp16"});
    cli.add_flag("--fast", &fast, "go fast");
    cli.add_int_list("--layers", &layers, "layer widths", 1, 4096);
    cli.add_common(&common);
  }
};

// Expect a usage error (exit 2), one line, naming the flag first.
void expect_usage_error(std::vector<std::string> args, const std::string& flag, const std::string& words = "") {
  Fixture f;
  Parsed p = run_parse(f.cli, args);
  INFO("args: ", args.size() ? args[0] : "", " ", args.size() > 1 ? args[1] : "", " -> ", p.msg);
  REQUIRE(p.threw);
  CHECK(p.code == nb::kExitUsage);
  CHECK(p.msg.rfind(flag + ": ", 0) == 0);
  CHECK(p.msg.find('\n') == std::string::npos);
  if (!words.empty()) CHECK(p.msg.find(words) != std::string::npos);
}

}  // namespace

TEST_CASE("cli: no arguments keeps every default and values() is typed") {
  Fixture f;
  Parsed p = run_parse(f.cli, {});
  REQUIRE_FALSE(p.threw);
  CHECK(p.result);
  nlohmann::json v = f.cli.values();
  CHECK(v["n"].is_number_integer());
  CHECK(v["n"] == 5000000);
  CHECK(v["epochs"] == 200);
  CHECK(v["lr"].is_number_float());
  CHECK(v["lr"] == doctest::Approx(0.01));
  CHECK(v["impl"] == "fp32");
  CHECK(v["fast"].is_boolean());
  CHECK(v["fast"] == false);
  CHECK(v["layers"] == nlohmann::json::array({784, 128, 10}));
  CHECK(v["seed"] == 42);
  CHECK(v["tag"] == "default");
  CHECK(v["warmup"] == 1);
  CHECK(v["repeats"] == 1);
  CHECK_FALSE(v.contains("--n"));
}

TEST_CASE("cli: space and = forms, booleans, lists, last value wins") {
  Fixture f;
  Parsed p = run_parse(f.cli, {"--n", "999", "--lr=0.25", "--shift", "-3.5", "--impl=fp16", "--fast", "--layers",
                               "7,5,3", "--seed", "18446744073709551615", "--validate", "--n=1001", "--out", "x/y",
                               "--tag", "run-1.b_2", "--warmup", "0", "--repeats", "5", "--no-cupti", "--trace=t.json",
                               "--deterministic", "--measure-peaks"});
  REQUIRE_FALSE(p.threw);
  CHECK(f.n == 1001);
  CHECK(f.lr == 0.25);
  CHECK(f.shift == -3.5);
  CHECK(f.impl == "fp16");
  CHECK(f.fast);
  CHECK(f.layers == std::vector<int>{7, 5, 3});
  CHECK(f.common.seed == 18446744073709551615ull);
  CHECK(f.common.validate);
  CHECK(f.common.out == "x/y");
  CHECK(f.common.tag == "run-1.b_2");
  CHECK(f.common.warmup == 0);
  CHECK(f.common.repeats == 5);
  CHECK(f.common.no_cupti);
  CHECK(f.common.trace == "t.json");
  CHECK(f.common.deterministic);
  CHECK(f.common.measure_peaks);
  CHECK(f.cli.values()["seed"] == 18446744073709551615ull);
  CHECK(f.cli.values()["layers"] == nlohmann::json::array({7, 5, 3}));
}

TEST_CASE("cli: boolean =true/=false forms and a bad boolean value") {
  Fixture f;
  REQUIRE_FALSE(run_parse(f.cli, {"--fast=true", "--validate=1"}).threw);
  CHECK(f.fast);
  CHECK(f.common.validate);
  REQUIRE_FALSE(run_parse(f.cli, {"--fast=false"}).threw);
  CHECK_FALSE(f.fast);
  expect_usage_error({"--fast=maybe"}, "--fast", "takes no value");
}

TEST_CASE("cli: unknown flag and stray positional argument") {
  expect_usage_error({"--bogus", "1"}, "--bogus", "unknown flag");
  expect_usage_error({"--n", "5", "--lR", "0.1"}, "--lR", "unknown flag");
  expect_usage_error({"--bogus=3"}, "--bogus", "unknown flag");
  Fixture f;
  Parsed p = run_parse(f.cli, {"stray"});
  REQUIRE(p.threw);
  CHECK(p.code == nb::kExitUsage);
  CHECK(p.msg.find("'stray'") != std::string::npos);
}

TEST_CASE("cli: missing value") {
  expect_usage_error({"--n"}, "--n", "missing value");
  expect_usage_error({"--lr", "--n", "5"}, "--lr", "missing value");
  expect_usage_error({"--layers"}, "--layers", "missing value");
  expect_usage_error({"--tag"}, "--tag", "missing value");
}

TEST_CASE("cli: non-numeric and trailing garbage") {
  expect_usage_error({"--n", "abc"}, "--n", "expected an integer");
  expect_usage_error({"--n", "12abc"}, "--n", "expected an integer");
  expect_usage_error({"--n", "1.5"}, "--n", "expected an integer");
  expect_usage_error({"--n", " 12"}, "--n", "expected an integer");
  expect_usage_error({"--n", "0x10"}, "--n", "expected an integer");
  expect_usage_error({"--n="}, "--n", "empty value");
  expect_usage_error({"--lr", "fast"}, "--lr", "expected a number");
  expect_usage_error({"--lr", "0.1x"}, "--lr", "expected a number");
  expect_usage_error({"--lr", "0x1p-3"}, "--lr", "expected a number");
  expect_usage_error({"--seed", "-1"}, "--seed", "non-negative integer");
  expect_usage_error({"--layers", "7,x,3"}, "--layers", "expected an integer");
  expect_usage_error({"--layers", "7,,3"}, "--layers", "empty item");
  expect_usage_error({"--layers", "7,5,"}, "--layers", "empty item");
}

TEST_CASE("cli: zero, negative and too-large sizes") {
  expect_usage_error({"--n", "0"}, "--n", ">= 1");
  expect_usage_error({"--n", "-5"}, "--n", ">= 1");
  expect_usage_error({"--epochs", "100001"}, "--epochs", "<= 100000");
  expect_usage_error({"--repeats", "0"}, "--repeats", ">= 1");
  expect_usage_error({"--warmup", "-1"}, "--warmup", ">= 0");
  expect_usage_error({"--layers", "7,0,3"}, "--layers", ">= 1");
  expect_usage_error({"--layers", "7,5000,3"}, "--layers", "<= 4096");
}

TEST_CASE("cli: integer overflow is out of range, not wrapped") {
  expect_usage_error({"--n", "99999999999999999999"}, "--n", "out of range");
  expect_usage_error({"--epochs", "3000000000"}, "--epochs", "<= 100000");
  expect_usage_error({"--warmup", "3000000000"}, "--warmup", "<= 2147483647");
  expect_usage_error({"--seed", "18446744073709551616"}, "--seed", "out of range");
  Fixture f;
  REQUIRE_FALSE(run_parse(f.cli, {"--n", "9223372036854775807"}).threw);
  CHECK(f.n == INT64_MAX);
}

TEST_CASE("cli: rates must be finite and > 0") {
  for (const char* bad : {"nan", "NaN", "inf", "-inf", "Infinity", "0", "-0.1", "0.0", "1e999", "-1e999"})
    expect_usage_error({"--lr", bad}, "--lr", "must be finite and > 0");
  expect_usage_error({"--lr", "1e-400"}, "--lr", "underflow");
  Fixture f;
  REQUIRE_FALSE(run_parse(f.cli, {"--lr", "1e-300"}).threw);
  CHECK(f.lr == 1e-300);
  REQUIRE_FALSE(run_parse(f.cli, {"--lr", "+2.5E+2"}).threw);
  CHECK(f.lr == 250.0);
}

TEST_CASE("cli: signed doubles honour their range and still refuse non-finite") {
  Fixture f;
  REQUIRE_FALSE(run_parse(f.cli, {"--shift", "0"}).threw);
  CHECK(f.shift == 0.0);
  expect_usage_error({"--shift", "-10.5"}, "--shift", ">= -10");
  expect_usage_error({"--shift", "11"}, "--shift", "<= 10");
  expect_usage_error({"--shift", "nan"}, "--shift", "must be finite");
}

TEST_CASE("cli: string choices and the file-name-safe tag") {
  expect_usage_error({"--impl", "fp64"}, "--impl", "one of fp32|fp16");
  expect_usage_error({"--tag", "a/b"}, "--tag", "only letters");
  expect_usage_error({"--tag", ".."}, "--tag");
  expect_usage_error({"--tag="}, "--tag", "empty");
  Fixture f;
  REQUIRE_FALSE(run_parse(f.cli, {"--out="}).threw);
  CHECK(f.common.out.empty());
}

TEST_CASE("cli: --help lists every flag with its type, default and help; parse returns false") {
  Fixture f;
  std::string h = f.cli.help();
  for (const char* name : {"--n INT", "--epochs INT", "--lr FLOAT", "--shift FLOAT", "--impl STRING", "--fast",
                           "--layers INT,INT,...", "--seed UINT64", "--validate", "--out STRING", "--tag STRING",
                           "--no-cupti", "--trace STRING", "--warmup INT", "--repeats INT", "--deterministic",
                           "--measure-peaks", "--help"})
    CHECK_MESSAGE(h.find(name) != std::string::npos, name);
  CHECK(h.find("number of points (default 5000000; >= 1)") != std::string::npos);
  CHECK(h.find("learning rate (default 0.01; finite, > 0)") != std::string::npos);
  CHECK(h.find("(default 784,128,10;") != std::string::npos);
  CHECK(h.find("(default fp32; one of: fp32|fp16)") != std::string::npos);
  CHECK(h.find("(default 42)") != std::string::npos);
  CHECK(h.find("usage: phase_test") == 0);
  // Every registered flag (values() keys) appears in the help.
  const nlohmann::json values = f.cli.values();
  REQUIRE(values.size() == 17);
  for (const auto& kv : values.items()) CHECK_MESSAGE(h.find("--" + kv.key()) != std::string::npos, kv.key());

  // parse("--help") prints to stdout and returns false; silence stdout for the duration.
  std::fflush(stdout);
  int saved = ::dup(1);
  int devnull = ::open("/dev/null", O_WRONLY);
  REQUIRE(saved >= 0);
  REQUIRE(devnull >= 0);
  ::dup2(devnull, 1);
  Parsed p = run_parse(f.cli, {"--n", "3", "--help", "--bogus"});
  std::fflush(stdout);
  ::dup2(saved, 1);
  ::close(saved);
  ::close(devnull);
  CHECK_FALSE(p.threw);
  CHECK_FALSE(p.result);
}

TEST_CASE("cli: registering a flag twice or without -- is a programming error") {
  nb::Cli cli("p", "");
  int a = 1;
  cli.add_int("--a", &a, "a");
  CHECK_THROWS_AS(cli.add_int("--a", &a, "again"), nb::Error);
  try {
    cli.add_int("a", &a, "no dashes");
    FAIL("expected a throw");
  } catch (const nb::Error& e) {
    CHECK(e.code == nb::kExitInternal);
  }
}
