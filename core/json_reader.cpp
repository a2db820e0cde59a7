#include "core/json_reader.h"

#include "core/errors.h"

namespace headroom::core {

std::string json_type_name(const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::object: return "object";
    case nlohmann::json::value_t::array: return "array";
    case nlohmann::json::value_t::string: return "string";
    case nlohmann::json::value_t::boolean: return "boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned: return "integer";
    case nlohmann::json::value_t::number_float: return "number";
    default: return "unsupported value";
  }
}

void JsonNode::fail(const std::string& message) const { throw InputError(path_ + ": " + message); }

void JsonNode::expect_object() const {
  if (!value_->is_object()) fail("expected an object, got " + json_type_name(*value_));
}

bool JsonNode::has(std::string_view key) const {
  return value_->is_object() && value_->contains(key);
}

JsonNode JsonNode::at(std::string_view key) const {
  expect_object();
  const auto it = value_->find(key);
  const std::string child = path_ + "." + std::string(key);
  if (it == value_->end()) throw InputError(child + ": missing");
  return JsonNode(*it, child);
}

std::vector<JsonNode> JsonNode::elements() const {
  if (!value_->is_array()) fail("expected an array, got " + json_type_name(*value_));
  std::vector<JsonNode> out;
  out.reserve(value_->size());
  for (std::size_t i = 0; i < value_->size(); ++i) {
    out.emplace_back((*value_)[i], path_ + "[" + std::to_string(i) + "]");
  }
  return out;
}

std::string JsonNode::as_string() const {
  if (!value_->is_string()) fail("expected a string, got " + json_type_name(*value_));
  return value_->get<std::string>();
}

std::int64_t JsonNode::as_int() const {
  if (value_->is_number_unsigned()) {
    const auto v = value_->get<std::uint64_t>();
    if (v > static_cast<std::uint64_t>(INT64_MAX)) fail("integer out of range");
    return static_cast<std::int64_t>(v);
  }
  if (!value_->is_number_integer()) fail("expected an integer, got " + json_type_name(*value_));
  return value_->get<std::int64_t>();
}

std::int64_t JsonNode::as_non_negative_int() const {
  if (!value_->is_number_integer()) {
    fail("expected a non-negative integer, got " + json_type_name(*value_));
  }
  const std::int64_t v = as_int();
  if (v < 0) fail("expected a non-negative integer, got " + std::to_string(v));
  return v;
}

std::int64_t JsonNode::as_int_in(std::int64_t min, std::int64_t max) const {
  if (!value_->is_number_integer()) fail("expected an integer, got " + json_type_name(*value_));
  const auto out_of_range = [&](const std::string& got) {
    fail("expected an integer from " + std::to_string(min) + " to " + std::to_string(max) + ", got " + got);
  };
  if (value_->is_number_unsigned() && value_->get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
    out_of_range(std::to_string(value_->get<std::uint64_t>()));
  }
  const std::int64_t v = as_int();
  if (v < min || v > max) out_of_range(std::to_string(v));
  return v;
}

double JsonNode::as_double() const {
  if (!value_->is_number()) fail("expected a number, got " + json_type_name(*value_));
  return value_->get<double>();
}

bool JsonNode::as_bool() const {
  if (!value_->is_boolean()) fail("expected a boolean, got " + json_type_name(*value_));
  return value_->get<bool>();
}

nlohmann::json parse_json(std::string_view text, std::string_view source) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    // nlohmann's message reads "[json.exception.parse_error.101] parse error at line 3, column 5: ...".
    // Besides parse errors it throws out_of_range for a number too large for a double ("1e400").
    std::string what = e.what();
    const auto pos = what.find("] ");
    if (pos != std::string::npos) what = what.substr(pos + 2);
    throw InputError(std::string(source) + ": malformed JSON: " + what);
  }
}

void expect_schema(const JsonNode& root, std::string_view expected) {
  root.expect_object();
  const std::string schema = root.at("schema").as_string();
  if (schema != expected) {
    root.at("schema").fail("expected \"" + std::string(expected) + "\", got \"" + schema + "\"");
  }
}

}  // namespace headroom::core
