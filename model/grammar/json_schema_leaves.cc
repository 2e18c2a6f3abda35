#include "model/grammar/json_schema_leaves.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "model/grammar/grammar.h"

namespace attn::grammar {
namespace {

std::string AnyDigits(size_t n) { return n == 0 ? "" : absl::StrCat("[0-9]{", n, "}"); }

bool All(absl::string_view s, char c) { return s.find_first_not_of(c) == absl::string_view::npos; }

std::string Seq(std::initializer_list<std::string> parts) {
  std::vector<std::string> kept;
  for (const auto& p : parts) {
    if (!p.empty()) kept.push_back(p);
  }
  return kept.empty() ? "\"\"" : absl::StrJoin(kept, " ");
}

// Digit strings of equal length from x to y (x <= y), leading zeros allowed.
std::string SameLength(absl::string_view x, absl::string_view y) {
  if (x.empty()) return "";
  if (x == y) return absl::StrCat("\"", x, "\"");
  const size_t rest = x.size() - 1;
  if (x[0] == y[0]) {
    return Seq({absl::StrCat("\"", x.substr(0, 1), "\""),
                absl::StrCat("(", SameLength(x.substr(1), y.substr(1)), ")")});
  }
  const bool low_full = All(x.substr(1), '0'), high_full = All(y.substr(1), '9');
  std::vector<std::string> alternatives;
  char mid_lo = x[0], mid_hi = y[0];
  if (!low_full) {
    alternatives.push_back(
        Seq({absl::StrCat("\"", x.substr(0, 1), "\""),
             absl::StrCat("(", SameLength(x.substr(1), std::string(rest, '9')), ")")}));
    ++mid_lo;
  }
  if (!high_full) --mid_hi;
  if (mid_lo <= mid_hi) {
    alternatives.push_back(
        Seq({absl::StrCat("[", std::string(1, mid_lo), "-", std::string(1, mid_hi), "]"),
             AnyDigits(rest)}));
  }
  if (!high_full) {
    alternatives.push_back(
        Seq({absl::StrCat("\"", y.substr(0, 1), "\""),
             absl::StrCat("(", SameLength(std::string(rest, '0'), y.substr(1)), ")")}));
  }
  return absl::StrJoin(alternatives, " | ");
}

size_t DigitCount(int64_t v) { return std::to_string(v).size(); }

int64_t Pow10(size_t n) {
  int64_t p = 1;
  while (n-- > 0) p *= 10;
  return p;
}

// Non-negative integers in [a, b] (b open when unset), no leading zeros.
std::vector<std::string> NonNegative(int64_t a, std::optional<int64_t> b) {
  std::vector<std::string> alternatives;
  if (b && a > *b) return alternatives;
  if (a == 0) {
    alternatives.emplace_back("\"0\"");
    a = 1;
    if (b && *b == 0) return alternatives;
  }
  const size_t first = DigitCount(a), last = b ? DigitCount(*b) : first;
  for (size_t length = first; length <= last; ++length) {
    const int64_t lo = std::max(a, Pow10(length - 1));
    const int64_t hi = b ? std::min(*b, Pow10(length) - 1) : Pow10(length) - 1;
    if (lo <= hi) alternatives.push_back(SameLength(std::to_string(lo), std::to_string(hi)));
  }
  if (!b) alternatives.push_back(absl::StrCat("[1-9] [0-9]{", first, ",}"));
  return alternatives;
}

std::string Group(const std::vector<std::string>& alternatives) {
  std::vector<std::string> wrapped;
  for (const auto& a : alternatives) wrapped.push_back(absl::StrCat("(", a, ")"));
  return absl::StrCat("(", absl::StrJoin(wrapped, " | "), ")");
}

// Numbers (no sign) whose value lies in [a, b], integer bounds.
std::string Magnitudes(int64_t a, std::optional<int64_t> b) {
  const std::string fraction = "(\".\" [0-9]+)?";
  std::vector<std::string> alternatives;
  auto below = NonNegative(a, b ? std::optional<int64_t>(*b - 1) : std::nullopt);
  if (!below.empty()) alternatives.push_back(absl::StrCat(Group(below), " ", fraction));
  if (b) alternatives.push_back(absl::StrCat("\"", *b, "\" (\".\" \"0\"+)?"));
  return Group(alternatives);
}

}  // namespace

std::string JsonBaseRules() {
  return R"(value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" char* "\""
char ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
integer ::= "-"? ( "0" | [1-9] [0-9]* )
boolean ::= "true" | "false"
null ::= "null"
)";
}

std::string IntegerRangeGbnf(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<std::string> parts;
  if (!hi || *hi >= 0) {
    auto positive = NonNegative(lo && *lo > 0 ? *lo : 0, hi);
    if (!positive.empty()) parts.push_back(Group(positive));
  }
  if (!lo || *lo < 0) {
    const int64_t a = hi && *hi < 0 ? -*hi : 1;
    std::optional<int64_t> b;
    if (lo) b = -*lo;
    auto negative = NonNegative(a, b);
    if (!negative.empty()) parts.push_back(absl::StrCat("\"-\" ", Group(negative)));
  }
  return parts.empty() ? "" : Group(parts);
}

std::string NumberRangeGbnf(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<std::string> parts;
  if (!hi || *hi >= 0) parts.push_back(Magnitudes(lo && *lo > 0 ? *lo : 0, hi));
  if (!lo || *lo < 0) {
    // -m lies in [lo, hi] for m in [max(-hi, 0), -lo]; -0 only where 0 does.
    const int64_t a = hi && *hi < 0 ? -*hi : 0;
    std::optional<int64_t> b;
    if (lo) b = -*lo;
    parts.push_back(absl::StrCat("\"-\" ", Magnitudes(a, b)));
  }
  return Group(parts);
}

std::optional<std::string> FormatGbnf(absl::string_view format) {
  // RFC 3339's full-date, days per month exact: February 29 only in leap
  // years (divisible by 4, and centuries only when divisible by 400).
  const std::string by4 = R"(( "0" [48] | [2468] [048] | [13579] [26] ))";
  const std::string date = absl::StrCat(
      R"(( [0-9]{4} "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ))",
      R"( | ( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ))",
      R"( | "02-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) ))", " | ( [0-9]{2} ", by4, " | ", by4,
      R"( "00" ) "-02-29" ))");
  const std::string time =
      R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,9} )? ( [zZ] | [-+] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))";
  const std::string octet =
      R"(( "25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9] [0-9] | [0-9] ))";
  const std::string label = R"([a-zA-Z0-9] ( [a-zA-Z0-9-]{0,61} [a-zA-Z0-9] )?)";
  std::string body;
  if (format == "date") {
    body = date;
  } else if (format == "time") {
    body = time;
  } else if (format == "date-time") {
    body = absl::StrCat(date, " [tT] ", time);
  } else if (format == "uuid") {
    body =
        R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})";
  } else if (format == "email") {
    body = absl::StrCat(R"([a-zA-Z0-9_%+-]+ ( "." [a-zA-Z0-9_%+-]+ )* "@" )", label, " ( \".\" ",
                        label, " )+");
  } else if (format == "ipv4") {
    body = absl::StrCat(octet, " \".\" ", octet, " \".\" ", octet, " \".\" ", octet);
  } else if (format == "ipv6") {
    body = R"([0-9a-fA-F]{1,4} ( ":" [0-9a-fA-F]{1,4} ){7})";
  } else if (format == "uri") {
    // RFC 3986's URI (registered names as hosts, no IP literals).
    const std::string sub = R"(( [a-zA-Z0-9._~!$&'()*+,;=-] | "%" [0-9a-fA-F]{2} ))";
    const std::string pchar = absl::StrCat("( ", sub, " | [:@] )");
    const std::string authority =
        absl::StrCat("( ( ", sub, " | \":\" )* \"@\" )? ", sub, "* ( \":\" [0-9]* )?");
    const std::string tail = absl::StrCat("( \"/\" ", pchar, "* )*");
    body =
        absl::StrCat(R"([a-zA-Z] [a-zA-Z0-9+.-]* ":" ( "//" )", authority, " ", tail, " | \"/\" ( ",
                     pchar, "+ ", tail, " )? | ", pchar, "+ ", tail, " )? ( \"?\" ( ", pchar,
                     " | [/?] )* )? ( \"#\" ( ", pchar, " | [/?] )* )?");
  } else if (format == "hostname") {
    // At most four labels of 61: never past 253 characters. "--" in a
    // label's third and fourth places marks an IDNA label (RFC 5891), whose
    // Punycode no grammar here checks: left out.
    const std::string short_label =
        R"([a-zA-Z0-9] ( [a-zA-Z0-9] | [a-zA-Z0-9-] [a-zA-Z0-9-]? [a-zA-Z0-9] | )"
        R"([a-zA-Z0-9-] ( [a-zA-Z0-9] [a-zA-Z0-9-] | "-" [a-zA-Z0-9] ) [a-zA-Z0-9-]{0,56} [a-zA-Z0-9] )?)";
    body = absl::StrCat(short_label, " ( \".\" ", short_label, " ){0,3}");
  } else if (format == "byte") {  // base64
    body = R"(( [A-Za-z0-9+/]{4} )* ( [A-Za-z0-9+/]{2} "==" | [A-Za-z0-9+/]{3} "=" )?)";
  } else {
    static const auto* standard = new std::set<std::string>{"duration",
                                                            "idn-email",
                                                            "idn-hostname",
                                                            "uri-reference",
                                                            "iri",
                                                            "iri-reference",
                                                            "uri-template",
                                                            "json-pointer",
                                                            "relative-json-pointer",
                                                            "regex",
                                                            "url",
                                                            "iso-time",
                                                            "iso-date-time",
                                                            "json-pointer-uri-fragment"};
    if (standard->count(std::string(format))) return std::nullopt;
    return std::string();  // float, double, password, binary, vendor names: annotations
  }
  return absl::StrCat("\"\\\"\" ", body, " \"\\\"\"");
}

std::optional<std::string> StringExceptGbnf(
    const std::vector<std::string>& excluded,
    const std::function<std::string(const std::string&)>& define) {
  for (const auto& name : excluded) {
    for (char c : name) {
      if (c < 0x20 || c > 0x7E || c == '"' || c == '\\') return std::nullopt;
    }
  }
  if (excluded.empty()) return std::string("string");
  std::set<std::string> names(excluded.begin(), excluded.end());
  const std::string rest = define(R"(char* "\"")");
  // Past a prefix: any character that leaves every name (escapes decoding
  // to " \ or a control character do), the end where no name ends, or the
  // next character of some name. Longest prefixes first.
  std::map<std::string, std::string> rule_of;
  std::set<std::string> prefixes;
  for (const auto& name : names) {
    for (size_t n = 0; n <= name.size(); ++n) prefixes.insert(name.substr(0, n));
  }
  for (auto it = prefixes.rbegin(); it != prefixes.rend(); ++it) {
    const std::string& prefix = *it;
    std::string off = R"([^"\\\x00-\x1F)";
    std::vector<std::string> alternatives;
    for (auto next = prefixes.upper_bound(prefix);
         next != prefixes.end() && next->compare(0, prefix.size(), prefix) == 0; ++next) {
      if (next->size() != prefix.size() + 1) continue;
      const char c = next->back();
      absl::StrAppend(&off, absl::StrFormat("\\x%02X", static_cast<int>(c)));
      alternatives.push_back(absl::StrCat(GbnfLiteral(std::string(1, c)), " ", rule_of[*next]));
    }
    alternatives.push_back(absl::StrCat(off, "] ", rest));
    alternatives.push_back(absl::StrCat(R"("\\" ["\\bfnrt] )", rest));
    if (!names.count(prefix)) alternatives.push_back(R"("\"")");
    rule_of[prefix] = define(absl::StrJoin(alternatives, " | "));
  }
  return absl::StrCat(R"("\"" )", rule_of[""]);
}

}  // namespace attn::grammar
