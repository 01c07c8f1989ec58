#include "service/config/config_loader.h"

#include <yaml-cpp/yaml.h>

#include <functional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "service/config/config_values.h"

extern char** environ;

namespace leapcache::server {
namespace {

// One setting: its key, what it means, and how to read and print it.
struct Setting {
  std::string name;
  std::string help;
  std::function<absl::Status(absl::string_view, ServerConfig*)> parse;
  std::function<std::string(const ServerConfig&)> print;
};

// A YAML double-quoted scalar that loads back as exactly `s`: backslash, quote and every control
// character escaped (a literal line break inside quotes would be folded into a space on load).
std::string Quoted(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7F) {
      absl::StrAppend(&out, "\\x", absl::Hex(u, absl::kZeroPad2));
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

Setting StringSetting(std::string name, std::string ServerConfig::*field, std::string help) {
  return {std::move(name), std::move(help),
          [field](absl::string_view v, ServerConfig* c) {
            c->*field = std::string(absl::StripAsciiWhitespace(v));
            return absl::OkStatus();
          },
          [field](const ServerConfig& c) { return Quoted(c.*field); }};
}

Setting BytesSetting(std::string name, uint64_t ServerConfig::*field, std::string help,
                     bool allow_percent = false) {
  return {std::move(name), std::move(help),
          [field, allow_percent](absl::string_view v, ServerConfig* c) -> absl::Status {
            absl::StatusOr<uint64_t> b = ParseBytes(v, allow_percent, PhysicalMemoryBytes());
            if (!b.ok()) return b.status();
            c->*field = *b;
            return absl::OkStatus();
          },
          [field](const ServerConfig& c) { return FormatBytes(c.*field); }};
}

Setting DurationSetting(std::string name, absl::Duration ServerConfig::*field, std::string help) {
  return {std::move(name), std::move(help),
          [field](absl::string_view v, ServerConfig* c) -> absl::Status {
            absl::StatusOr<absl::Duration> d = ParseDurationValue(v);
            if (!d.ok()) return d.status();
            c->*field = *d;
            return absl::OkStatus();
          },
          [field](const ServerConfig& c) { return absl::FormatDuration(c.*field); }};
}

template <typename Int>
Setting IntSetting(std::string name, Int ServerConfig::*field, int64_t min, int64_t max,
                   std::string help) {
  return {std::move(name), std::move(help),
          [field, min, max](absl::string_view v, ServerConfig* c) -> absl::Status {
            absl::StatusOr<int64_t> i = ParseInteger(v, min, max);
            if (!i.ok()) return i.status();
            c->*field = static_cast<Int>(*i);
            return absl::OkStatus();
          },
          [field](const ServerConfig& c) { return absl::StrCat(c.*field); }};
}

Setting NumberSetting(std::string name, double ServerConfig::*field, std::string help) {
  return {std::move(name), std::move(help),
          [field](absl::string_view v, ServerConfig* c) -> absl::Status {
            absl::StatusOr<double> d = ParseNumber(v);
            if (!d.ok()) return d.status();
            c->*field = *d;
            return absl::OkStatus();
          },
          [field](const ServerConfig& c) { return FormatNumber(c.*field); }};
}

Setting BoolSetting(std::string name, bool ServerConfig::*field, std::string help) {
  return {std::move(name), std::move(help),
          [field](absl::string_view v, ServerConfig* c) -> absl::Status {
            absl::StatusOr<bool> b = ParseBool(v);
            if (!b.ok()) return b.status();
            c->*field = *b;
            return absl::OkStatus();
          },
          [field](const ServerConfig& c) { return std::string(c.*field ? "true" : "false"); }};
}

Setting EvictionPolicySetting() {
  return {"eviction_policy", "lru or state-aware (compute saved per byte, with recency decay)",
          [](absl::string_view v, ServerConfig* c) -> absl::Status {
            const std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(v));
            if (t == "lru") {
              c->eviction_policy = core::EvictionPolicyKind::kLru;
            } else if (t == "state-aware" || t == "state_aware") {
              c->eviction_policy = core::EvictionPolicyKind::kStateAware;
            } else {
              return absl::InvalidArgumentError("expected lru or state-aware");
            }
            return absl::OkStatus();
          },
          [](const ServerConfig& c) {
            return std::string(c.eviction_policy == core::EvictionPolicyKind::kLru ? "lru"
                                                                                   : "state-aware");
          }};
}

// The one table of settings. config.h documents each field's default and trade-off.
const std::vector<Setting>& Settings() {
  using C = ServerConfig;
  static const std::vector<Setting>* settings = new std::vector<Setting>{
      StringSetting("listen", &C::listen, "gRPC host:port; port 0 picks a free port"),
      StringSetting("port_file", &C::port_file, "write the bound gRPC port to this file"),
      StringSetting("metrics_listen", &C::metrics_listen,
                    "HTTP host:port of /metrics, /healthz, /readyz; empty disables"),
      StringSetting("tls_cert_file", &C::tls_cert_file,
                    "PEM certificate chain of the gRPC port; with tls_key_file turns TLS on"),
      StringSetting("tls_key_file", &C::tls_key_file, "PEM private key of tls_cert_file"),
      StringSetting("tls_client_ca_file", &C::tls_client_ca_file,
                    "PEM CA bundle: require and verify client certificates (mutual TLS)"),
      StringSetting("tokens_file", &C::tokens_file,
                    "bearer tokens, one \"TOKEN TENANT\" line each; empty: no authentication"),
      BytesSetting("memory_budget", &C::memory_budget,
                   "primary memory tier, bytes (512MiB, 8GiB) or % of physical memory",
                   /*allow_percent=*/true),
      BytesSetting("gpu_memory_budget", &C::gpu_memory_budget,
                   "GPU tier in front of the host tier (CUDA builds), bytes; 0 disables"),
      IntSetting("gpu_device", &C::gpu_device, 0, 1024,
                 "CUDA device of the GPU tier, the codec kernels and NCCL data-plane sessions"),
      StringSetting("host_tier_mapping", &C::host_tier_mapping,
                    "host tiers pinned and mapped for gpu_device: auto, on or off"),
      StringSetting("compute_backend", &C::compute_backend,
                    "who encodes dense puts, decodes dense gets and steps attached decode "
                    "sessions: cpu, cuda or auto"),
      BytesSetting("spill_budget", &C::spill_budget, "spill tier, bytes or %; 0 disables",
                   /*allow_percent=*/true),
      BytesSetting("page_bytes", &C::page_bytes, "allocation unit of the tiers (4KiB multiple)"),
      EvictionPolicySetting(),
      NumberSetting("eviction_half_life", &C::eviction_half_life,
                    "state-aware: accesses after which an untouched checkpoint's worth halves"),
      BoolSetting("promote_on_hit", &C::promote_on_hit,
                  "move checkpoints hit in the spill tier back to the primary tier"),
      DurationSetting("put_ttl", &C::put_ttl, "default time from ReservePut to CommitPut"),
      DurationSetting("max_put_ttl", &C::max_put_ttl, "longest put TTL a client may ask for"),
      DurationSetting("reaper_interval", &C::reaper_interval, "how often expired puts are freed"),
      IntSetting("max_pending_puts", &C::max_pending_puts, 1, int64_t{1} << 32,
                 "uncommitted puts at once"),
      BytesSetting("tenant_max_bytes", &C::tenant_max_bytes,
                   "memory one tenant's checkpoints and puts may hold; 0: no limit"),
      BytesSetting("tenant_max_pinned_bytes", &C::tenant_max_pinned_bytes,
                   "pinned memory per tenant; 0: no limit"),
      IntSetting("tenant_max_pending_puts", &C::tenant_max_pending_puts, 0, int64_t{1} << 32,
                 "uncommitted puts per tenant; 0: no limit"),
      IntSetting("tenant_max_namespaces", &C::tenant_max_namespaces, 0, 65536,
                 "namespaces per tenant; 0: no limit"),
      IntSetting("tenant_max_decode_sessions", &C::tenant_max_decode_sessions, 0, 1 << 20,
                 "attached-decode sessions per tenant; 0: no limit"),
      StringSetting("stats_scope", &C::stats_scope,
                    "with tokens, what Stats shows a tenant: tenant (its own) or store"),
      BytesSetting("max_message_bytes", &C::max_message_bytes,
                   "largest gRPC message sent or received"),
      BytesSetting("chunk_bytes", &C::chunk_bytes, "data bytes per streamed chunk"),
      IntSetting("max_concurrent_streams", &C::max_concurrent_streams, 1, INT32_MAX,
                 "concurrent calls per connection"),
      BytesSetting("grpc_memory_budget", &C::grpc_memory_budget,
                   "memory gRPC may hold for connections and messages in flight"),
      IntSetting("max_threads", &C::max_threads, 2, 65536, "threads serving calls"),
      DurationSetting("keepalive_time", &C::keepalive_time, "ping idle connections this often"),
      DurationSetting("keepalive_timeout", &C::keepalive_timeout,
                      "close a connection whose ping is unanswered this long"),
      DurationSetting("min_client_ping_interval", &C::min_client_ping_interval,
                      "shortest ping interval allowed to clients"),
      DurationSetting("max_connection_idle", &C::max_connection_idle,
                      "close connections without calls for this long"),
      DurationSetting("handshake_timeout", &C::handshake_timeout,
                      "close connections whose TLS/HTTP2 handshake takes longer"),
      BytesSetting("max_metadata_bytes", &C::max_metadata_bytes, "largest call metadata"),
      DurationSetting("stream_idle_timeout", &C::stream_idle_timeout,
                      "cancel a Get or UploadPut stream after this long without a message"),
      DurationSetting("stream_max_age", &C::stream_max_age,
                      "cancel a Get stream open this long, releasing its read lease"),
      BytesSetting("decode_memory_budget", &C::decode_memory_budget,
                   "live-state memory of all attached-decode sessions; 0 disables",
                   /*allow_percent=*/true),
      IntSetting("decode_max_slots", &C::decode_max_slots, 1, 1 << 20,
                 "live requests per decode session"),
      IntSetting("decode_max_sessions", &C::decode_max_sessions, 1, 1 << 20,
                 "decode sessions at once"),
      DurationSetting("decode_idle_timeout", &C::decode_idle_timeout,
                      "close decode sessions without calls for this long"),
      BoolSetting("decode_step_channels", &C::decode_step_channels,
                  "serve same-host engines' decode steps through shared memory"),
      DurationSetting("decode_step_channel_spin", &C::decode_step_channel_spin,
                      "how long a step channel polls before it sleeps"),
      BoolSetting("data_plane_transfer_channels", &C::data_plane_transfer_channels,
                  "serve same-host engines' gets and puts through shared memory"),
      DurationSetting("data_plane_transfer_channel_spin", &C::data_plane_transfer_channel_spin,
                      "how long a transfer channel polls before it sleeps"),
      DurationSetting("shutdown_grace", &C::shutdown_grace,
                      "on SIGTERM, time calls in flight get to finish"),
  };
  return *settings;
}

// Settings that were folded into others: naming one is an error that says what replaced it.
std::string Replaced(absl::string_view name) {
  static constexpr std::pair<const char*, const char*> kReplaced[] = {
      {"encode_backend", "compute_backend"},
      {"dense_decode_backend", "compute_backend"},
      {"decode_backend", "compute_backend"},
      {"decode_device", "gpu_device"},
  };
  for (const auto& [old_name, now] : kReplaced) {
    if (name == old_name) return absl::StrCat(" (replaced by ", now, ")");
  }
  return "";
}

const Setting* FindSetting(absl::string_view name) {
  for (const Setting& s : Settings()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::string EnvName(const std::string& setting) {
  return absl::StrCat("LEAPCACHE_", absl::AsciiStrToUpper(setting));
}
std::string FlagName(const std::string& setting) {
  return absl::StrCat("--", absl::StrReplaceAll(setting, {{"_", "-"}}));
}

constexpr char kConfigEnv[] = "LEAPCACHE_CONFIG";

absl::Status Apply(const Setting& s, absl::string_view value, const std::string& source,
                   LoadedConfig* out) {
  absl::Status st = s.parse(value, &out->config);
  if (!st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("invalid value \"", value, "\" for ", s.name,
                                                   " (", source, "): ", st.message()));
  }
  out->sources[s.name] = source;
  return absl::OkStatus();
}

absl::Status ApplyYaml(const std::string& path, LoadedConfig* out) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return absl::NotFoundError(absl::StrCat("cannot read config file ", path));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("config file ", path, ": ", e.what()));
  }
  if (root.IsNull()) return absl::OkStatus();  // an empty file sets nothing
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config file ", path, ": expected a map of setting: value"));
  }
  for (const auto& kv : root) {
    const int line = kv.first.Mark().line + 1;
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
    const Setting* s = FindSetting(key);
    if (s == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("config file ", path, " line ", line, ": unknown setting \"", key, "\"",
                       Replaced(key)));
    }
    if (!kv.second.IsScalar()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config file ", path, " line ", line, ": ", key, " needs a single value"));
    }
    if (absl::Status st =
            Apply(*s, kv.second.Scalar(), absl::StrCat("config file ", path, " line ", line), out);
        !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

// A flag and its value; `value` is empty if the flag had none.
struct ParsedFlag {
  std::string name;  // as written, without leading dashes
  std::string value;
  bool has_value = false;
};

absl::StatusOr<std::vector<ParsedFlag>> SplitFlags(const std::vector<std::string>& args) {
  std::vector<ParsedFlag> flags;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h") {
      flags.push_back({"help", "", false});
      continue;
    }
    if (!absl::StartsWith(a, "--") || a.size() == 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument \"", a, "\"; settings are --name=value (see --help)"));
    }
    ParsedFlag f;
    const std::string body = a.substr(2);
    const size_t eq = body.find('=');
    f.name = absl::StrReplaceAll(body.substr(0, eq), {{"-", "_"}});
    if (eq != std::string::npos) {
      f.value = body.substr(eq + 1);
      f.has_value = true;
    } else if (f.name != "help" && f.name != "check_config" && i + 1 < args.size()) {
      f.value = args[++i];
      f.has_value = true;
    }
    flags.push_back(std::move(f));
  }
  return flags;
}

}  // namespace

Environment CurrentEnvironment() {
  Environment env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const absl::string_view kv(*e);
    const size_t eq = kv.find('=');
    if (eq != absl::string_view::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

absl::StatusOr<LoadedConfig> LoadConfig(const std::vector<std::string>& args,
                                        const Environment& env) {
  LoadedConfig out;
  absl::StatusOr<std::vector<ParsedFlag>> flags = SplitFlags(args);
  if (!flags.ok()) return flags.status();

  // Control flags first: they decide which file to read.
  std::vector<ParsedFlag> setting_flags;
  for (const ParsedFlag& f : *flags) {
    if (f.name == "help") {
      out.help = true;
    } else if (f.name == "check_config") {
      if (f.has_value) return absl::InvalidArgumentError("--check-config takes no value");
      out.check_only = true;
    } else if (f.name == "config") {
      if (!f.has_value || f.value.empty()) {
        return absl::InvalidArgumentError("--config needs a file path");
      }
      out.config_file = f.value;
    } else if (FindSetting(f.name) != nullptr) {
      if (!f.has_value) {
        return absl::InvalidArgumentError(
            absl::StrCat(FlagName(f.name), " needs a value (", FlagName(f.name), "=VALUE)"));
      }
      setting_flags.push_back(f);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown flag --", absl::StrReplaceAll(f.name, {{"_", "-"}}), Replaced(f.name),
          " (see --help)"));
    }
  }
  if (out.help) return out;
  if (out.config_file.empty()) {
    if (auto it = env.find(kConfigEnv); it != env.end()) {
      if (it->second.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(kConfigEnv, " is set but empty"));
      }
      out.config_file = it->second;
    }
  }

  if (!out.config_file.empty()) {
    if (absl::Status st = ApplyYaml(out.config_file, &out); !st.ok()) return st;
  }
  for (const Setting& s : Settings()) {
    const std::string name = EnvName(s.name);
    if (auto it = env.find(name); it != env.end()) {
      if (absl::Status st = Apply(s, it->second, "environment variable " + name, &out); !st.ok()) {
        return st;
      }
    }
  }
  for (const auto& [name, value] : env) {
    if (absl::StartsWith(name, "LEAPCACHE_") && name != kConfigEnv) {
      const std::string setting = absl::AsciiStrToLower(name.substr(10));
      if (FindSetting(setting) == nullptr) {
        out.warnings.push_back(
            absl::StrCat("ignoring environment variable ", name, ": no such setting",
                         Replaced(setting)));
      }
    }
  }
  for (const ParsedFlag& f : setting_flags) {
    const Setting& s = *FindSetting(f.name);
    if (absl::Status st = Apply(s, f.value, "flag " + FlagName(s.name), &out); !st.ok()) {
      return st;
    }
  }

  if (absl::Status st = ValidateConfig(out.config); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("invalid configuration: ", st.message()));
  }
  if (absl::Status st = CheckConfigFiles(out.config); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("invalid configuration: ", st.message()));
  }
  return out;
}

std::string DescribeConfig(const LoadedConfig& loaded) {
  std::string out;
  for (const Setting& s : Settings()) {
    auto it = loaded.sources.find(s.name);
    absl::StrAppend(&out, s.name, ": ", s.print(loaded.config), "  # ",
                    it == loaded.sources.end() ? "default" : it->second, "\n");
  }
  return out;
}

std::string ConfigUsage(const std::string& program) {
  const ServerConfig defaults;
  std::string out = absl::StrCat(
      "usage: ", program, " [--config FILE] [--check-config] [--SETTING=VALUE ...]\n\n",
      "Settings come from, lowest precedence first: defaults, the YAML file (--config FILE or\n",
      "LEAPCACHE_CONFIG), environment variables LEAPCACHE_<SETTING>, flags --<setting>.\n",
      "--check-config validates the settings, prints the effective ones and exits (0 valid,\n",
      "1 invalid).\n\nSettings (default):\n");
  for (const Setting& s : Settings()) {
    absl::StrAppend(&out, "  ", FlagName(s.name), " (", s.print(defaults), ")\n      ", s.help,
                    "\n");
  }
  return out;
}

}  // namespace leapcache::server
