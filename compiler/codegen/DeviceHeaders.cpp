//===- DeviceHeaders.cpp - The device-helper prelude of generated modules
//--===//

#include "compiler/codegen/DeviceHeaders.h"
#include "compiler/codegen/CodeWriter.h"
#include "compiler/codegen/Embedded.h"
#include "compiler/support/Check.h"
#include "compiler/support/ContentHash.h"

#include <algorithm>
#include <map>
#include <string_view>

namespace lcejit::codegen {

namespace {

std::string_view trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos)
    return {};
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

/// If `line` is `#include "lcejit_*.cuh"` (spaces allowed), the included name.
std::string localInclude(std::string_view line) {
  std::string_view t = trim(line);
  if (t.empty() || t[0] != '#')
    return "";
  t = trim(t.substr(1));
  if (t.substr(0, 7) != "include")
    return "";
  t = trim(t.substr(7));
  if (t.size() < 2 || t.front() != '"')
    return "";
  size_t close = t.find('"', 1);
  if (close == std::string_view::npos)
    return "";
  std::string name(t.substr(1, close - 1));
  return name.rfind("lcejit_", 0) == 0 ? name : "";
}

bool isPragmaOnce(std::string_view line) {
  std::string_view t = trim(line);
  if (t.empty() || t[0] != '#')
    return false;
  t = trim(t.substr(1));
  if (t.substr(0, 6) != "pragma")
    return false;
  return trim(t.substr(6)) == "once";
}

template <class F> void forEachLine(std::string_view text, F f) {
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos)
      end = text.size();
    f(text.substr(start, end - start));
    start = end + 1;
  }
}

struct HeaderSet {
  std::map<std::string, std::string_view> text; // sorted by name
  std::map<std::string, std::vector<std::string>>
      deps; // local includes, in file order

  HeaderSet() {
    for (const embedded::EmbeddedFile &f : embedded::files()) {
      LCEJIT_CHECK(f.name && f.text, "embedded file without name or text");
      LCEJIT_CHECK(!text.count(f.name), "embedded file '{}' appears twice",
                   f.name);
      text[f.name] = f.text;
    }
    LCEJIT_CHECK(!text.empty(),
                 "no device headers were embedded (runtime/device/*.cuh)");
    for (const auto &[name, body] : text) {
      std::vector<std::string> &d = deps[name];
      forEachLine(body, [&](std::string_view line) {
        std::string inc = localInclude(line);
        if (inc.empty())
          return;
        LCEJIT_CHECK(text.count(inc),
                     "device header '{}' includes '{}', which is not embedded",
                     name, inc);
        d.push_back(inc);
      });
    }
  }

  std::vector<std::string> order() const {
    std::vector<std::string> out;
    std::map<std::string, int> state; // 0 new, 1 in progress, 2 done
    auto visit = [&](auto &&self, const std::string &n) -> void {
      int &s = state[n];
      LCEJIT_CHECK(s != 1,
                   "device headers include each other in a cycle through '{}'",
                   n);
      if (s == 2)
        return;
      s = 1;
      for (const std::string &d : deps.at(n))
        self(self, d);
      state[n] = 2;
      out.push_back(n);
    };
    for (const auto &entry : text)
      visit(visit, entry.first);
    return out;
  }
};

const HeaderSet &headers() {
  static const HeaderSet set;
  return set;
}

} // namespace

std::vector<std::string> deviceHeaderOrder() { return headers().order(); }

const std::string &deviceHeaderHash() {
  static const std::string hash = [] {
    ContentHash h;
    for (const auto &[name, body] : headers().text) // sorted by name
      h.update(fmt::format("{}:{}:", name, body.size())).update(body).update("\n");
    return h.finishHex();
  }();
  return hash;
}

const std::string &deviceHeaderPrelude() {
  static const std::string prelude = [] {
    const HeaderSet &set = headers();
    CodeWriter w;
    for (const std::string &name : set.order()) {
      w.line("// ==== begin {} (runtime/device) ====", name);
      forEachLine(set.text.at(name), [&](std::string_view line) {
        std::string inc = localInclude(line);
        if (!inc.empty())
          w.line("// #include \"{}\" (prepended above)", inc);
        else if (isPragmaOnce(line))
          w.line("// #pragma once (prelude)");
        else
          w.raw(
              fmt::format("{}\n", line)); // verbatim, with its own indentation
      });
      w.line("// ==== end {} ====", name);
      w.blank();
    }
    return w.take();
  }();
  return prelude;
}

} // namespace lcejit::codegen
