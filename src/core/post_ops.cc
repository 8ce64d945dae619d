// PostOps: the post-operation chain of a forward problem, its names and its text form.
#include <charconv>
#include <cmath>
#include <string>
#include <system_error>

#include "convplan/problem.h"
#include "core/quoted.h"

namespace convplan {
namespace {

constexpr const char* kPostOpNames[kPostOpKinds] = {"bias",      "add",  "relu",    "relu6", "gelu",
                                                    "gelu_tanh", "silu", "sigmoid", "tanh",  "elu"};
constexpr const char* kPostOpAccepted =
    "bias, add, add*SCALE, relu, relu6, gelu, gelu_tanh, silu, sigmoid, tanh, elu";

// Shortest decimal that reads back as exactly v (as problem_text.cc prints alpha and beta).
// The shortest decimal of v, with an exponent's '+' left out ("1e+94" -> "1e94"): '+' joins
// the ops of a chain, so the canonical text must not hold one (from_chars reads "1e94" alike).
std::string format_scale(double v) {
  if (v == 0.0) return "0";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  std::string text(buf, r.ptr);
  if (const size_t plus = text.find("e+"); plus != std::string::npos) text.erase(plus + 1, 1);
  return text;
}

Status token_error(std::string_view token, size_t pos, const std::string& what) {
  return invalid_argument(detail::quoted(token) + " at " + std::to_string(pos) +
                          " in the post-op chain " + what);
}

// One token of the chain ("relu", "add", "add*0.5") into op.
Status parse_token(std::string_view token, size_t pos, PostOp& op) {
  if (token.empty()) {
    std::string what = "empty post-op at ";  // appended: see core/quoted.h
    what += std::to_string(pos);
    what += " in the chain (ops are joined by a single '+': ";
    what += kPostOpAccepted;
    what += ")";
    return invalid_argument(what);
  }
  const size_t star = token.find('*');
  const std::string_view name = token.substr(0, star);
  int found = -1;
  for (int k = 0; k < kPostOpKinds; ++k)
    if (name == kPostOpNames[k]) found = k;
  if (found < 0)
    return token_error(token, pos, std::string("is not a post-op (") + kPostOpAccepted + ")");
  op = PostOp{static_cast<PostOpKind>(found), 1.0};
  if (star == std::string_view::npos) return ok_status();
  if (op.kind != PostOpKind::kAdd) {
    return token_error(token, pos, "has a scale; only add takes one (add*0.5)");
  }
  const std::string_view digits = token.substr(star + 1);
  double scale = 0;
  const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), scale);
  if (digits.empty() || r.ec != std::errc() || r.ptr != digits.data() + digits.size() ||
      !std::isfinite(scale)) {
    return token_error(token, pos,
                       "has scale " + detail::quoted(digits) + ", which is not a finite number");
  }
  op.scale = scale == 0.0 ? 0.0 : scale;  // -0 reads as 0, as equal problems must print alike
  return ok_status();
}

}  // namespace

const char* to_string(PostOpKind k) {
  const int i = static_cast<int>(k);
  return i >= 0 && i < kPostOpKinds ? kPostOpNames[i] : "?";
}

bool PostOps::has(PostOpKind k) const {
  for (int i = 0; i < count && i < kMaxPostOps; ++i)
    if (ops[static_cast<size_t>(i)].kind == k) return true;
  return false;
}

void PostOps::push(PostOpKind kind, double scale) {
  if (count >= kMaxPostOps) {
    ++count;  // validate() reports the overflow
    return;
  }
  ops[static_cast<size_t>(count++)] = PostOp{kind, scale};
}

bool PostOps::operator==(const PostOps& other) const {
  if (count != other.count) return false;
  for (int i = 0; i < count && i < kMaxPostOps; ++i)
    if (!(ops[static_cast<size_t>(i)] == other.ops[static_cast<size_t>(i)])) return false;
  return true;
}

std::string PostOps::to_string() const {
  std::string s;
  for (int i = 0; i < count && i < kMaxPostOps; ++i) {
    const PostOp& op = ops[static_cast<size_t>(i)];
    if (i > 0) s += '+';
    s += convplan::to_string(op.kind);
    if (op.kind == PostOpKind::kAdd && op.scale != 1.0) {
      s += '*';
      s += format_scale(op.scale);
    }
  }
  return s;
}

StatusOr<PostOps> PostOps::parse(std::string_view text) {
  if (text.empty())
    return invalid_argument(std::string("the post-op chain is empty (") + kPostOpAccepted + ")");
  PostOps chain;
  size_t start = 0;
  while (true) {
    const size_t end = std::min(text.find('+', start), text.size());
    const std::string_view token = text.substr(start, end - start);
    PostOp op;
    CONVPLAN_RETURN_IF_ERROR(parse_token(token, start, op));
    if ((op.kind == PostOpKind::kBias || op.kind == PostOpKind::kAdd) && chain.has(op.kind)) {
      return token_error(token, start,
                         std::string("repeats ") + convplan::to_string(op.kind) +
                             " (a chain has one bias and one add at most)");
    }
    if (chain.count == kMaxPostOps) {
      std::string what = "is one op too many (at most ";  // appended: see core/quoted.h
      what += std::to_string(kMaxPostOps);
      what += ")";
      return token_error(token, start, what);
    }
    chain.push(op.kind, op.scale);
    if (end == text.size()) break;
    start = end + 1;
  }
  return chain;
}

}  // namespace convplan
