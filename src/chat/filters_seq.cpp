// jinja2's filters on sequences and mappings: length, first, join, map, select, sort, ...
#include <fmt/format.h>

#include <algorithm>

#include "chat/builtins.h"
#include "chat/interpreter.h"
#include "chat/pystring.h"

namespace kestrel::chat {
namespace {

// jinja2's make_attrgetter: "a.b.0" walks items (getitem) part by part.
Value lookup_attribute(const Value& item, const Value& attribute, const Value* fallback) {
  Value current = item;
  std::vector<Value> parts;
  if (attribute.is_string()) {
    for (const std::string& part : pystr::split(attribute.as_string(), std::string("."), -1)) {
      bool digits =
          !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
      parts.push_back(digits ? Value(static_cast<int64_t>(std::stoll(part))) : Value(part));
    }
  } else {
    parts.push_back(attribute);
  }
  for (const Value& part : parts) {
    current = get_item(current, part);
    if (fallback && current.is_undefined()) current = *fallback;
  }
  return current;
}

Value ignore_case(const Value& v) { return v.is_string() ? Value(pystr::lower(v.as_string())) : v; }

// Sort key for sort/dictsort/unique/min/max: the attribute (if any), lower-cased unless case-sensitive.
Value sort_key(const Value& item, const Value* attribute, bool case_sensitive) {
  Value key = item;
  if (attribute && !attribute->is_none()) {
    if (attribute->is_string() && attribute->as_string().find(',') != std::string::npos) {
      ValueList keys;
      for (const std::string& part : pystr::split(attribute->as_string(), std::string(","), -1)) {
        Value k = lookup_attribute(item, Value(part), nullptr);
        keys.push_back(case_sensitive ? k : ignore_case(k));
      }
      return Value::list(std::move(keys));
    }
    key = lookup_attribute(item, *attribute, nullptr);
  }
  return case_sensitive ? key : ignore_case(key);
}

bool flag(const CallArgs& args, size_t position, const char* name) {
  const Value* v = args.get(position, name);
  return v && truthy(*v);
}

// Remaining positional arguments after `skip`, for select/map style filters.
CallArgs rest_args(const CallArgs& args, size_t skip) {
  CallArgs rest;
  for (size_t i = skip; i < args.positional.size(); ++i) rest.positional.push_back(args.positional[i]);
  rest.keyword = args.keyword;
  return rest;
}

Value select_filter(Interpreter& interp, const Value& input, CallArgs& args, bool by_attribute, bool keep) {
  size_t test_at = by_attribute ? 1 : 0;
  const Value* attribute = by_attribute ? args.get(0, "attribute") : nullptr;
  if (by_attribute && !attribute) script_error("selectattr() missing the attribute to test");
  const Value* test_name = args.get(test_at, "");
  CallArgs test_args = rest_args(args, test_at + 1);
  ValueList out;
  if (!truthy(input)) return Value::generator({});  // jinja2: `if value:` guards the loop
  for (const Value& item : iterate(input)) {
    Value subject = by_attribute ? lookup_attribute(item, *attribute, nullptr) : item;
    bool passed = test_name ? interp.test(to_str(*test_name), subject, test_args) : truthy(subject);
    if (passed == keep) out.push_back(item);
  }
  return Value::generator(std::move(out));
}

Value map_filter(Interpreter& interp, const Value& input, CallArgs& args) {
  ValueList out;
  const Value* attribute = nullptr;
  const Value* fallback = nullptr;
  for (const auto& [key, value] : args.keyword) {
    if (key == "attribute") attribute = &value;
    if (key == "default") fallback = &value;
  }
  if (!truthy(input)) return Value::generator({});  // jinja2: `if value:` guards the loop
  if (attribute) {
    for (const Value& item : iterate(input)) out.push_back(lookup_attribute(item, *attribute, fallback));
    return Value::generator(std::move(out));
  }
  if (args.positional.empty()) script_error("map requires a filter argument");
  std::string filter_name = to_str(args.positional[0]);
  CallArgs filter_args = rest_args(args, 1);
  for (const Value& item : iterate(input)) out.push_back(interp.filter(filter_name, item, filter_args));
  return Value::generator(std::move(out));
}

Value sort_filter(const Value& input, CallArgs& args) {
  args.expect_at_most(3, {"reverse", "case_sensitive", "attribute"}, "sort");
  bool reverse = flag(args, 0, "reverse");
  bool case_sensitive = flag(args, 1, "case_sensitive");
  const Value* attribute = args.get(2, "attribute");
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : iterate(input))
    keyed.emplace_back(sort_key(item, attribute, case_sensitive), item);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? value_less(b.first, a.first) : value_less(a.first, b.first);
  });
  ValueList out;
  for (auto& [key, item] : keyed) out.push_back(std::move(item));
  return Value::list(std::move(out));
}

Value dictsort_filter(const Value& input, CallArgs& args) {
  args.expect_at_most(3, {"case_sensitive", "by", "reverse"}, "dictsort");
  if (!input.is_dict()) script_error("You can only sort by either \"key\" or \"value\" of a mapping");
  bool case_sensitive = flag(args, 0, "case_sensitive");
  const Value* by = args.get(1, "by");
  bool by_value = by && to_str(*by) == "value";
  if (by && !by_value && to_str(*by) != "key")
    script_error("You can only sort by either \"key\" or \"value\"");
  bool reverse = flag(args, 2, "reverse");
  std::vector<std::pair<Value, Value>> keyed;
  for (const auto& [key, value] : input.dict_data().entries) {
    Value k = by_value ? value : key;
    keyed.emplace_back(case_sensitive ? k : ignore_case(k), Value::tuple({key, value}));
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? value_less(b.first, a.first) : value_less(a.first, b.first);
  });
  ValueList out;
  for (auto& [key, item] : keyed) out.push_back(std::move(item));
  return Value::list(std::move(out));
}

Value unique_filter(const Value& input, CallArgs& args) {
  args.expect_at_most(2, {"case_sensitive", "attribute"}, "unique");
  bool case_sensitive = flag(args, 0, "case_sensitive");
  const Value* attribute = args.get(1, "attribute");
  ValueList seen, out;
  for (const Value& item : iterate(input)) {
    Value key = sort_key(item, attribute, case_sensitive);
    if (key.is_list() || key.is_dict() || key.is_namespace())
      script_error(fmt::format("unhashable type: '{}'", python_type_name(key)));
    bool dup = std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return values_equal(s, key); });
    if (dup) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return Value::generator(std::move(out));
}

Value min_max_filter(const Value& input, CallArgs& args, bool want_max) {
  args.expect_at_most(2, {"case_sensitive", "attribute"}, want_max ? "max" : "min");
  bool case_sensitive = flag(args, 0, "case_sensitive");
  const Value* attribute = args.get(1, "attribute");
  ValueList items = iterate(input);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = sort_key(items[0], attribute, case_sensitive);
  for (size_t i = 1; i < items.size(); ++i) {
    Value key = sort_key(items[i], attribute, case_sensitive);
    if (want_max ? value_less(best_key, key) : value_less(key, best_key)) {
      best = i;
      best_key = key;
    }
  }
  return items[best];
}

Value join_filter(const Value& input, CallArgs& args) {
  args.expect_at_most(2, {"d", "attribute"}, "join");
  const Value* separator = args.get(0, "d");
  const Value* attribute = args.get(1, "attribute");
  std::string sep = separator ? to_str(*separator) : "";
  std::string out;
  ValueList items = iterate(input);
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    out += to_str(attribute && !attribute->is_none() ? lookup_attribute(items[i], *attribute, nullptr)
                                                     : items[i]);
  }
  return Value(std::move(out));
}

Value sum_filter(const Value& input, CallArgs& args) {
  args.expect_at_most(2, {"attribute", "start"}, "sum");
  const Value* attribute = args.get(0, "attribute");
  const Value* start = args.get(1, "start");
  Value total = start ? *start : Value(0);
  for (const Value& item : iterate(input))
    total = binary_op(
        "+", total, attribute && !attribute->is_none() ? lookup_attribute(item, *attribute, nullptr) : item);
  return total;
}

}  // namespace

bool call_sequence_filter(Interpreter& interp, const std::string& name, const Value& input, CallArgs& args,
                          Value& result) {
  if (name == "length" || name == "count") {
    result = Value(value_length(input));
  } else if (name == "first" && input.is_generator()) {
    GeneratorData& g = input.generator_data();
    result = g.position < g.items.size() ? g.items[g.position++]
                                         : Value::undefined("No first item, sequence was empty.");
  } else if (name == "first" || name == "last") {
    if (name == "last" && input.is_generator()) script_error("'generator' object is not reversible");
    ValueList items = iterate(input);
    if (items.empty()) {
      result = Value::undefined(fmt::format("No {} item, sequence was empty.", name));
    } else {
      result = name == "first" ? items.front() : items.back();
    }
  } else if (name == "list") {
    result = Value::list(iterate(input));
  } else if (name == "items") {
    ValueList pairs;
    if (input.is_dict()) {
      for (const auto& [key, value] : input.dict_data().entries) pairs.push_back(Value::tuple({key, value}));
    } else if (!input.is_undefined()) {
      script_error("Can only get item pairs from a mapping.");
    }
    result = Value::generator(std::move(pairs));
  } else if (name == "join") {
    result = join_filter(input, args);
  } else if (name == "map") {
    result = map_filter(interp, input, args);
  } else if (name == "select" || name == "reject") {
    result = select_filter(interp, input, args, false, name == "select");
  } else if (name == "selectattr" || name == "rejectattr") {
    result = select_filter(interp, input, args, true, name == "selectattr");
  } else if (name == "sort") {
    result = sort_filter(input, args);
  } else if (name == "dictsort") {
    result = dictsort_filter(input, args);
  } else if (name == "unique") {
    result = unique_filter(input, args);
  } else if (name == "min" || name == "max") {
    result = min_max_filter(input, args, name == "max");
  } else if (name == "sum") {
    result = sum_filter(input, args);
  } else if (name == "reverse") {
    if (input.is_string()) {
      std::u32string text = pystr::decode(input.as_string());
      std::reverse(text.begin(), text.end());
      result = Value(pystr::encode(text));
    } else {
      // reversed(seq) is an iterator; a generator cannot be reversed, so jinja2 makes it a list.
      bool was_generator = input.is_generator();
      ValueList items = iterate(input);
      std::reverse(items.begin(), items.end());
      result = was_generator ? Value::list(std::move(items)) : Value::generator(std::move(items));
    }
  } else if (name == "batch") {
    const Value* size = args.get(0, "linecount");
    if (!size || size->as_int() <= 0) script_error("batch() needs a positive line count");
    const Value* fill = args.get(1, "fill_with");
    ValueList batches, current;
    for (const Value& item : iterate(input)) {
      current.push_back(item);
      if (static_cast<int64_t>(current.size()) == size->as_int()) {
        batches.push_back(Value::list(std::move(current)));
        current = ValueList();
      }
    }
    if (!current.empty()) {
      if (fill && !fill->is_none())
        while (static_cast<int64_t>(current.size()) < size->as_int()) current.push_back(*fill);
      batches.push_back(Value::list(std::move(current)));
    }
    result = Value::generator(std::move(batches));
  } else {
    return false;
  }
  return true;
}

}  // namespace kestrel::chat
