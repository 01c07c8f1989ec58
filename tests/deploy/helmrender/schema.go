// A subset of JSON Schema (draft-07), enough for values.schema.json files. A schema that uses a
// keyword outside the subset is rejected when loaded (checkSchemaKeywords), so a constraint can
// never be silently skipped here while Helm enforces it.
package main

import (
	"fmt"
	"math"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Keywords that only annotate; they never make an instance invalid.
var annotationKeywords = map[string]bool{
	"$schema": true, "$id": true, "$comment": true, "title": true, "description": true,
	"default": true, "examples": true, "definitions": true, "readOnly": true, "writeOnly": true,
	"deprecated": true,
	// Helm's validator treats formats as annotations; only "pattern" constrains strings here.
	"format": true,
}

var assertionKeywords = map[string]bool{
	"$ref": true, "type": true, "enum": true, "const": true,
	"properties": true, "required": true, "additionalProperties": true, "patternProperties": true,
	"propertyNames": true, "minProperties": true, "maxProperties": true,
	"items": true, "minItems": true, "maxItems": true, "uniqueItems": true,
	"minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true,
	"multipleOf": true, "minLength": true, "maxLength": true, "pattern": true,
	"anyOf": true, "oneOf": true, "allOf": true, "not": true, "if": true, "then": true, "else": true,
}

// checkSchemaKeywords walks a schema and rejects unknown keywords and malformed patterns.
func checkSchemaKeywords(s interface{}, path string) error {
	switch t := s.(type) {
	case bool:
		return nil
	case map[string]interface{}:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			v := t[k]
			if !annotationKeywords[k] && !assertionKeywords[k] {
				return fmt.Errorf("%s: keyword %q is not supported by this checker", path, k)
			}
			switch k {
			case "properties", "patternProperties", "definitions":
				m, ok := v.(map[string]interface{})
				if !ok {
					return fmt.Errorf("%s/%s: expected an object", path, k)
				}
				for name, sub := range m {
					if k == "patternProperties" {
						if _, err := regexp.Compile(name); err != nil {
							return fmt.Errorf("%s/%s: %v", path, k, err)
						}
					}
					if err := checkSchemaKeywords(sub, path+"/"+k+"/"+name); err != nil {
						return err
					}
				}
			case "additionalProperties", "propertyNames", "not", "if", "then", "else":
				if err := checkSchemaKeywords(v, path+"/"+k); err != nil {
					return err
				}
			case "items":
				if list, ok := v.([]interface{}); ok {
					for i, sub := range list {
						if err := checkSchemaKeywords(sub, fmt.Sprintf("%s/items/%d", path, i)); err != nil {
							return err
						}
					}
				} else if err := checkSchemaKeywords(v, path+"/items"); err != nil {
					return err
				}
			case "anyOf", "oneOf", "allOf":
				list, ok := v.([]interface{})
				if !ok || len(list) == 0 {
					return fmt.Errorf("%s/%s: expected a non-empty array", path, k)
				}
				for i, sub := range list {
					if err := checkSchemaKeywords(sub, fmt.Sprintf("%s/%s/%d", path, k, i)); err != nil {
						return err
					}
				}
			case "pattern":
				p, ok := v.(string)
				if !ok {
					return fmt.Errorf("%s/pattern: expected a string", path)
				}
				if _, err := regexp.Compile(p); err != nil {
					return fmt.Errorf("%s/pattern: %v", path, err)
				}
			case "$ref":
				if r, ok := v.(string); !ok || !strings.HasPrefix(r, "#/") {
					return fmt.Errorf("%s/$ref: only local references (#/...) are supported", path)
				}
			}
		}
		return nil
	default:
		return fmt.Errorf("%s: a schema is an object or a boolean", path)
	}
}

// validateSchema returns one message per violation ("tiers.primary.budget: ..."), empty if the
// instance is valid.
func validateSchema(schema interface{}, instance interface{}) []string {
	v := &validator{root: schema}
	v.validate(schema, instance, "")
	return v.errors
}

type validator struct {
	root   interface{}
	errors []string
}

func (v *validator) fail(path, format string, args ...interface{}) {
	if path == "" {
		path = "(root)"
	}
	v.errors = append(v.errors, path+": "+fmt.Sprintf(format, args...))
}

// valid reports whether instance satisfies schema, without recording errors.
func (v *validator) valid(schema interface{}, instance interface{}, path string) bool {
	sub := &validator{root: v.root}
	sub.validate(schema, instance, path)
	return len(sub.errors) == 0
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (v *validator) resolve(ref string) (interface{}, error) {
	cur := v.root
	for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]interface{})
		if !ok {
			return nil, fmt.Errorf("$ref %s does not resolve", ref)
		}
		if cur, ok = m[part]; !ok {
			return nil, fmt.Errorf("$ref %s does not resolve", ref)
		}
	}
	return cur, nil
}

func typeOf(x interface{}) string {
	switch t := x.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case float64:
		if t == math.Trunc(t) && !math.IsInf(t, 0) {
			return "integer"
		}
		return "number"
	case []interface{}:
		return "array"
	case map[string]interface{}:
		return "object"
	}
	return fmt.Sprintf("%T", x)
}

func typeMatches(want string, x interface{}) bool {
	got := typeOf(x)
	return got == want || (want == "number" && got == "integer")
}

func number(x interface{}) (float64, bool) {
	f, ok := x.(float64)
	return f, ok
}

func (v *validator) validate(schema interface{}, x interface{}, path string) {
	switch s := schema.(type) {
	case bool:
		if !s {
			v.fail(path, "no value is allowed here")
		}
		return
	case map[string]interface{}:
		v.validateObject(s, x, path)
	}
}

func (v *validator) validateObject(s map[string]interface{}, x interface{}, path string) {
	if ref, ok := s["$ref"].(string); ok {
		target, err := v.resolve(ref)
		if err != nil {
			v.fail(path, "%v", err)
			return
		}
		v.validate(target, x, path)
	}

	if t, ok := s["type"]; ok {
		var types []string
		switch tt := t.(type) {
		case string:
			types = []string{tt}
		case []interface{}:
			for _, e := range tt {
				types = append(types, fmt.Sprint(e))
			}
		}
		matched := false
		for _, want := range types {
			if typeMatches(want, x) {
				matched = true
			}
		}
		if !matched {
			v.fail(path, "expected %s, got %s", strings.Join(types, " or "), typeOf(x))
			return // the other keywords would only repeat the type error
		}
	}
	if enum, ok := s["enum"].([]interface{}); ok {
		found := false
		for _, e := range enum {
			if reflect.DeepEqual(e, x) {
				found = true
			}
		}
		if !found {
			v.fail(path, "must be one of %s (got %s)", formatList(enum), format(x))
		}
	}
	if c, ok := s["const"]; ok && !reflect.DeepEqual(c, x) {
		v.fail(path, "must be %s (got %s)", format(c), format(x))
	}

	switch t := x.(type) {
	case map[string]interface{}:
		v.validateProperties(s, t, path)
	case []interface{}:
		v.validateItems(s, t, path)
	case string:
		n := float64(utf8.RuneCountInString(t))
		if m, ok := number(s["minLength"]); ok && n < m {
			if m == 1 {
				v.fail(path, "must not be empty")
			} else {
				v.fail(path, "must be at least %v characters long", m)
			}
		}
		if m, ok := number(s["maxLength"]); ok && n > m {
			v.fail(path, "must be at most %v characters long", m)
		}
		if p, ok := s["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(t) {
			v.fail(path, "%q does not match pattern %s", t, p)
		}
	case float64:
		if m, ok := number(s["minimum"]); ok && t < m {
			v.fail(path, "must be >= %v (got %v)", m, t)
		}
		if m, ok := number(s["maximum"]); ok && t > m {
			v.fail(path, "must be <= %v (got %v)", m, t)
		}
		if m, ok := number(s["exclusiveMinimum"]); ok && t <= m {
			v.fail(path, "must be > %v (got %v)", m, t)
		}
		if m, ok := number(s["exclusiveMaximum"]); ok && t >= m {
			v.fail(path, "must be < %v (got %v)", m, t)
		}
		if m, ok := number(s["multipleOf"]); ok && m > 0 && math.Mod(t, m) != 0 {
			v.fail(path, "must be a multiple of %v (got %v)", m, t)
		}
	}

	if list, ok := s["allOf"].([]interface{}); ok {
		for _, sub := range list {
			v.validate(sub, x, path)
		}
	}
	if list, ok := s["anyOf"].([]interface{}); ok {
		matched := false
		for _, sub := range list {
			if v.valid(sub, x, path) {
				matched = true
				break
			}
		}
		if !matched {
			v.fail(path, "matches none of the allowed forms%s", describeAlternatives(list))
		}
	}
	if list, ok := s["oneOf"].([]interface{}); ok {
		n := 0
		for _, sub := range list {
			if v.valid(sub, x, path) {
				n++
			}
		}
		if n != 1 {
			v.fail(path, "must match exactly one of the allowed forms (matches %d)%s", n,
				describeAlternatives(list))
		}
	}
	if not, ok := s["not"]; ok && v.valid(not, x, path) {
		v.fail(path, "matches a form that is not allowed")
	}
	if cond, ok := s["if"]; ok {
		if v.valid(cond, x, path) {
			if then, ok := s["then"]; ok {
				v.validate(then, x, path)
			}
		} else if els, ok := s["else"]; ok {
			v.validate(els, x, path)
		}
	}
}

func (v *validator) validateProperties(s map[string]interface{}, obj map[string]interface{}, path string) {
	if req, ok := s["required"].([]interface{}); ok {
		for _, r := range req {
			if _, present := obj[fmt.Sprint(r)]; !present {
				v.fail(join(path, fmt.Sprint(r)), "is required")
			}
		}
	}
	n := float64(len(obj))
	if m, ok := number(s["minProperties"]); ok && n < m {
		v.fail(path, "must have at least %v properties", m)
	}
	if m, ok := number(s["maxProperties"]); ok && n > m {
		v.fail(path, "must have at most %v properties", m)
	}
	props, _ := s["properties"].(map[string]interface{})
	patterns, _ := s["patternProperties"].(map[string]interface{})
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		val := obj[k]
		if names, ok := s["propertyNames"]; ok && !v.valid(names, k, path) {
			v.fail(join(path, k), "is not an allowed property name")
		}
		covered := false
		if sub, ok := props[k]; ok {
			covered = true
			v.validate(sub, val, join(path, k))
		}
		for p, sub := range patterns {
			if regexp.MustCompile(p).MatchString(k) {
				covered = true
				v.validate(sub, val, join(path, k))
			}
		}
		if covered {
			continue
		}
		if ap, ok := s["additionalProperties"]; ok {
			if b, isBool := ap.(bool); isBool && !b {
				allowed := make([]string, 0, len(props))
				for name := range props {
					allowed = append(allowed, name)
				}
				sort.Strings(allowed)
				v.fail(join(path, k), "is not an allowed property (allowed: %s)", strings.Join(allowed, ", "))
			} else {
				v.validate(ap, val, join(path, k))
			}
		}
	}
}

func (v *validator) validateItems(s map[string]interface{}, list []interface{}, path string) {
	n := float64(len(list))
	if m, ok := number(s["minItems"]); ok && n < m {
		v.fail(path, "must have at least %v items", m)
	}
	if m, ok := number(s["maxItems"]); ok && n > m {
		v.fail(path, "must have at most %v items", m)
	}
	if u, ok := s["uniqueItems"].(bool); ok && u {
		for i := range list {
			for j := i + 1; j < len(list); j++ {
				if reflect.DeepEqual(list[i], list[j]) {
					v.fail(path, "items %d and %d are equal", i, j)
				}
			}
		}
	}
	switch items := s["items"].(type) {
	case []interface{}:
		for i, sub := range items {
			if i < len(list) {
				v.validate(sub, list[i], path+"["+strconv.Itoa(i)+"]")
			}
		}
	case nil:
	default:
		for i, x := range list {
			v.validate(items, x, path+"["+strconv.Itoa(i)+"]")
		}
	}
}

// describeAlternatives names each alternative by its description, when the schema gives one.
func describeAlternatives(list []interface{}) string {
	var parts []string
	for _, sub := range list {
		if m, ok := sub.(map[string]interface{}); ok {
			if d, ok := m["description"].(string); ok {
				parts = append(parts, d)
			}
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, "; ")
}

func format(x interface{}) string {
	if s, ok := x.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(x)
}

func formatList(list []interface{}) string {
	parts := make([]string, len(list))
	for i, x := range list {
		parts[i] = format(x)
	}
	return strings.Join(parts, ", ")
}
