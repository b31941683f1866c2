// common/cli.cpp — see cli.h.
//
// Each registered flag is a small record: its name, a type word for --help, the default rendered
// at registration, a constraint text, a setter that parses one string (and throws the one-line
// error), and a getter that renders the current value as JSON for the run record. Adding a new
// kind of flag means writing one add_xxx that fills those five things.
#include "cli.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>

#include "errors.h"

namespace nb {

struct Cli::Flag {
  std::string name;        // "--n"
  std::string type;        // "INT", "FLOAT", "STRING", "INT,INT,...", "" for booleans
  std::string help;
  std::string default_text;
  std::string constraint;  // "", ">= 1", "one of: a|b", ...
  bool is_bool = false;
  std::function<void(const std::string&)> set;  // parse and store; throws Error(kExitUsage)
  std::function<nlohmann::json()> get;
};

namespace {

[[noreturn]] void usage_error(const std::string& flag, const std::string& problem) {
  throw Error(kExitUsage, flag + ": " + problem);
}

// Quote a user-supplied value for an error message, keeping it to one short line.
std::string quote_value(const std::string& v) {
  std::string s;
  for (char c : v.substr(0, 60)) s += (c == '\n' || c == '\r' || c == '\t') ? ' ' : c;
  if (v.size() > 60) s += "...";
  return "'" + s + "'";
}

// Strict integer parse: optional sign, digits only, no whitespace, no trailing characters.
int64_t parse_int64(const std::string& flag, const std::string& v) {
  if (v.empty()) usage_error(flag, "expected an integer, got an empty value");
  size_t i = (v[0] == '-' || v[0] == '+') ? 1 : 0;
  if (i == v.size()) usage_error(flag, "expected an integer, got " + quote_value(v));
  for (size_t k = i; k < v.size(); ++k)
    if (v[k] < '0' || v[k] > '9') usage_error(flag, "expected an integer, got " + quote_value(v));
  errno = 0;
  char* end = nullptr;
  long long r = std::strtoll(v.c_str(), &end, 10);
  if (errno == ERANGE) usage_error(flag, "integer out of range, got " + quote_value(v));
  if (end != v.c_str() + v.size()) usage_error(flag, "expected an integer, got " + quote_value(v));
  return static_cast<int64_t>(r);
}

uint64_t parse_uint64(const std::string& flag, const std::string& v) {
  if (v.empty()) usage_error(flag, "expected a non-negative integer, got an empty value");
  size_t i = (v[0] == '+') ? 1 : 0;
  if (i == v.size()) usage_error(flag, "expected a non-negative integer, got " + quote_value(v));
  for (size_t k = i; k < v.size(); ++k)
    if (v[k] < '0' || v[k] > '9') usage_error(flag, "expected a non-negative integer, got " + quote_value(v));
  errno = 0;
  char* end = nullptr;
  unsigned long long r = std::strtoull(v.c_str(), &end, 10);
  if (errno == ERANGE) usage_error(flag, "integer out of range (max 18446744073709551615), got " + quote_value(v));
  if (end != v.c_str() + v.size()) usage_error(flag, "expected a non-negative integer, got " + quote_value(v));
  return static_cast<uint64_t>(r);
}

// Strict decimal number: digits, '.', sign, exponent. "nan"/"inf" are named as non-finite;
// anything else (hex floats, "12abc", whitespace) is "expected a number".
double parse_double(const std::string& flag, const std::string& v, bool positive) {
  const std::string finite_rule = positive ? "must be finite and > 0" : "must be finite";
  if (v.empty()) usage_error(flag, "expected a number, got an empty value");
  std::string word;
  for (char c : v) word += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!word.empty() && (word[0] == '+' || word[0] == '-')) word.erase(0, 1);
  if (word == "nan" || word == "inf" || word == "infinity") usage_error(flag, finite_rule + ", got " + quote_value(v));
  for (char c : v) {
    bool ok = (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E';
    if (!ok) usage_error(flag, "expected a number, got " + quote_value(v));
  }
  errno = 0;
  char* end = nullptr;
  double r = std::strtod(v.c_str(), &end);
  if (end == v.c_str() || end != v.c_str() + v.size()) usage_error(flag, "expected a number, got " + quote_value(v));
  if (errno == ERANGE && !(std::fabs(r) < 1.0)) usage_error(flag, finite_rule + " (overflow), got " + quote_value(v));
  if (errno == ERANGE) usage_error(flag, "number too small to represent (underflow), got " + quote_value(v));
  if (!std::isfinite(r)) usage_error(flag, finite_rule + ", got " + quote_value(v));
  return r;
}

// Shortest text that reads back as the same double (0.01, 10.0, 1e-300), as JSON writes it.
std::string fmt_double(double v) { return nlohmann::json(v).dump(); }

std::string join_ints(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

std::string range_text(int64_t min, int64_t max, int64_t type_max) {
  std::string s;
  if (min > std::numeric_limits<int64_t>::min()) s = ">= " + std::to_string(min);
  if (max < type_max) s += (s.empty() ? "<= " : ", <= ") + std::to_string(max);
  return s;
}

}  // namespace

Cli::Cli(std::string program, std::string description)
    : program_(std::move(program)), description_(std::move(description)) {}

void Cli::add(std::shared_ptr<Flag> f) {
  if (f->name.size() < 3 || f->name.compare(0, 2, "--") != 0)
    throw Error(kExitInternal, "Cli: flag name must start with --, got '" + f->name + "'");
  if (f->name == "--help")
    throw Error(kExitInternal, "Cli: --help is built in");
  for (const auto& g : flags_)
    if (g->name == f->name) throw Error(kExitInternal, "Cli: flag " + f->name + " registered twice");
  flags_.push_back(std::move(f));
}

void Cli::add_int(const std::string& name, int64_t* target, const std::string& help, int64_t min, int64_t max) {
  auto f = std::make_shared<Flag>();
  f->name = name;
  f->type = "INT";
  f->help = help;
  f->default_text = std::to_string(*target);
  f->constraint = range_text(min, max, std::numeric_limits<int64_t>::max());
  f->set = [name, target, min, max](const std::string& v) {
    int64_t x = parse_int64(name, v);
    if (x < min) usage_error(name, "must be >= " + std::to_string(min) + ", got " + quote_value(v));
    if (x > max) usage_error(name, "must be <= " + std::to_string(max) + ", got " + quote_value(v));
    *target = x;
  };
  f->get = [target] { return nlohmann::json(*target); };
  add(f);
}

void Cli::add_int(const std::string& name, int* target, const std::string& help, int64_t min, int64_t max) {
  // Clamp the allowed range to what an int can hold.
  int64_t lo = std::max<int64_t>(min, std::numeric_limits<int>::min());
  int64_t hi = std::min<int64_t>(max, std::numeric_limits<int>::max());
  auto f = std::make_shared<Flag>();
  f->name = name;
  f->type = "INT";
  f->help = help;
  f->default_text = std::to_string(*target);
  f->constraint = range_text(lo, hi, std::numeric_limits<int>::max());
  f->set = [name, target, lo, hi](const std::string& v) {
    int64_t x = parse_int64(name, v);
    if (x < lo) usage_error(name, "must be >= " + std::to_string(lo) + ", got " + quote_value(v));
    if (x > hi) usage_error(name, "must be <= " + std::to_string(hi) + ", got " + quote_value(v));
    *target = static_cast<int>(x);
  };
  f->get = [target] { return nlohmann::json(*target); };
  add(f);
}

void Cli::add_uint64(const std::string& name, uint64_t* target, const std::string& help) {
  auto f = std::make_shared<Flag>();
  f->name = name;
  f->type = "UINT64";
  f->help = help;
  f->default_text = std::to_string(*target);
  f->set = [name, target](const std::string& v) { *target = parse_uint64(name, v); };
  f->get = [target] { return nlohmann::json(*target); };
  add(f);
}

void Cli::add_double(const std::string& name, double* target, const std::string& help, bool positive, double min,
                     double max) {
  auto f = std::make_shared<Flag>();
  f->name = name;
  f->type = "FLOAT";
  f->help = help;
  f->default_text = fmt_double(*target);
  std::string c = positive ? "finite, > 0" : "finite";
  if (min > -std::numeric_limits<double>::max()) c += ", >= " + fmt_double(min);
  if (max < std::numeric_limits<double>::max()) c += ", <= " + fmt_double(max);
  f->constraint = c;
  f->set = [name, target, positive, min, max](const std::string& v) {
    double x = parse_double(name, v, positive);
    if (positive && !(x > 0)) usage_error(name, "must be finite and > 0, got " + quote_value(v));
    if (x < min) usage_error(name, "must be >= " + fmt_double(min) + ", got " + quote_value(v));
    if (x > max) usage_error(name, "must be <= " + fmt_double(max) + ", got " + quote_value(v));
    *target = x;
  };
  f->get = [target] { return nlohmann::json(*target); };
  add(f);
}

void Cli::add_string(const std::string& name, std::string* target, const std::string& help,
                     std::vector<std::string> choices) {
  auto f = std::make_shared<Flag>();
  f->name = name;
  f->type = "STRING";
  f->help = help;
  f->default_text = target->empty() ? "\"\"" : *target;
  std::string all;
  for (size_t i = 0; i < choices.size(); ++i) all += (i ? "|" : "") + choices[i];
  if (!choices.empty()) f->constraint = "one of: " + all;
  f->set = [name, target, choices, all](const std::string& v) {
    if (!choices.empty()) {
      bool ok = false;
      for (const auto& c : choices) ok = ok || c == v;
      if (!ok) usage_error(name, "must be one of " + all + ", got " + quote_value(v));
    }
    *target = v;
  };
  f->get = [target] { return nlohmann::json(*target); };
  add(f);
}

void Cli::add_flag(const std::string& name, bool* target, const std::string& help) {
  auto f = std::make_shared<Flag>();
  f->name = name;
  f->type = "";
  f->help = help;
  f->default_text = *target ? "on" : "off";
  f->is_bool = true;
  // Bare "--name" sets it; "--name=true|false|1|0" is also accepted.
  f->set = [name, target](const std::string& v) {
    if (v == "true" || v == "1") *target = true;
    else if (v == "false" || v == "0") *target = false;
    else usage_error(name, "takes no value (or =true/=false), got " + quote_value(v));
  };
  f->get = [target] { return nlohmann::json(*target); };
  add(f);
}

void Cli::add_int_list(const std::string& name, std::vector<int>* target, const std::string& help, int64_t min,
                       int64_t max) {
  int64_t lo = std::max<int64_t>(min, std::numeric_limits<int>::min());
  int64_t hi = std::min<int64_t>(max, std::numeric_limits<int>::max());
  auto f = std::make_shared<Flag>();
  f->name = name;
  f->type = "INT,INT,...";
  f->help = help;
  f->default_text = target->empty() ? "\"\"" : join_ints(*target);
  std::string r = range_text(lo, hi, std::numeric_limits<int>::max());
  f->constraint = "non-empty" + (r.empty() ? "" : ", each " + r);
  f->set = [name, target, lo, hi](const std::string& v) {
    if (v.empty()) usage_error(name, "expected a comma-separated list of integers, got an empty value");
    std::vector<int> out;
    size_t start = 0;
    while (true) {
      size_t comma = v.find(',', start);
      std::string item = v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (item.empty()) usage_error(name, "empty item in list " + quote_value(v));
      int64_t x = parse_int64(name, item);
      if (x < lo) usage_error(name, "each item must be >= " + std::to_string(lo) + ", got " + quote_value(item));
      if (x > hi) usage_error(name, "each item must be <= " + std::to_string(hi) + ", got " + quote_value(item));
      out.push_back(static_cast<int>(x));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    *target = std::move(out);
  };
  f->get = [target] { return nlohmann::json(*target); };
  add(f);
}

void Cli::add_common(CommonOptions* o) {
  add_uint64("--seed", &o->seed, "random seed (data, weights, batch order)");
  add_flag("--validate", &o->validate, "compare with the float64 CPU reference; exit 1 if a tolerance is exceeded");
  add_string("--out", &o->out, "run-record directory; empty means profiles/<device-slug>");
  // The tag becomes part of a file name: keep it to a safe alphabet.
  auto tag = std::make_shared<Flag>();
  tag->name = "--tag";
  tag->type = "STRING";
  tag->help = "record file is <out>/<phase>__<tag>.json";
  tag->default_text = o->tag;
  tag->constraint = "[A-Za-z0-9._-]+";
  std::string* tag_target = &o->tag;
  tag->set = [tag_target](const std::string& v) {
    if (v.empty()) usage_error("--tag", "must not be empty");
    for (char c : v) {
      bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                c == '_' || c == '-';
      if (!ok) usage_error("--tag", "may contain only letters, digits, '.', '_' and '-', got " + quote_value(v));
    }
    if (v == "." || v == "..") usage_error("--tag", "must not be '.' or '..'");
    *tag_target = v;
  };
  tag->get = [tag_target] { return nlohmann::json(*tag_target); };
  add(tag);
  add_flag("--no-cupti", &o->no_cupti, "keep our CUPTI tracer off (event timers only)");
  add_string("--trace", &o->trace, "write our CUPTI Chrome trace (JSON) to this file");
  add_int("--warmup", &o->warmup, "untimed runs before the measured ones", 0);
  add_int("--repeats", &o->repeats, "measured runs (the median is reported)", 1);
  add_flag("--deterministic", &o->deterministic, "no order-dependent floating-point atomics");
  add_flag("--measure-peaks", &o->measure_peaks, "measure copy GB/s and fp16 TFLOP/s and record them");
}

bool Cli::parse(int argc, const char* const* argv) {
  auto find = [this](const std::string& name) -> Flag* {
    for (const auto& f : flags_)
      if (f->name == name) return f.get();
    return nullptr;
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i] ? argv[i] : "";
    if (arg == "--help" || arg == "-h") {
      std::fputs(help().c_str(), stdout);
      return false;
    }
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0)
      usage_error(quote_value(arg), "unexpected argument (flags look like --name value; see --help)");
    std::string name = arg, value;
    bool has_inline = false;
    size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_inline = true;
    }
    Flag* f = find(name);
    // A name holding a line break is quoted (and its breaks blanked) so the error stays one line.
    if (!f) usage_error(name.find_first_of("\n\r") == std::string::npos ? name : quote_value(name), "unknown flag (see --help)");
    if (f->is_bool) {
      f->set(has_inline ? value : "true");
      continue;
    }
    if (!has_inline) {
      // A following "--something" is taken as the next flag, not as this flag's value.
      if (i + 1 >= argc || argv[i + 1] == nullptr ||
          (std::string(argv[i + 1]).compare(0, 2, "--") == 0 && std::string(argv[i + 1]).size() > 2))
        usage_error(name, "missing value (expected " + f->type + ")");
      value = argv[++i];
    }
    f->set(value);
  }
  return true;
}

std::string Cli::help() const {
  std::ostringstream os;
  os << "usage: " << program_ << " [flags]\n";
  if (!description_.empty()) os << description_ << "\n";
  os << "\nflags (--name value or --name=value; booleans are bare --name):\n";
  size_t width = 6;  // "--help"
  for (const auto& f : flags_) width = std::max(width, f->name.size() + (f->type.empty() ? 0 : 1 + f->type.size()));
  auto line = [&](const std::string& head, const std::string& rest) {
    os << "  " << head << std::string(width - head.size() + 2, ' ') << rest << "\n";
  };
  for (const auto& f : flags_) {
    std::string head = f->name + (f->type.empty() ? "" : " " + f->type);
    std::string rest = f->help + " (default " + f->default_text;
    if (!f->constraint.empty()) rest += "; " + f->constraint;
    rest += ")";
    line(head, rest);
  }
  line("--help", "print this help and exit");
  return os.str();
}

nlohmann::json Cli::values() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& f : flags_) j[f->name.substr(2)] = f->get();
  return j;
}

}  // namespace nb
