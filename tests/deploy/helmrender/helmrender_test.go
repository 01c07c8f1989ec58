// Tests of the renderer against Helm's documented behaviour, so that a chart passing here does
// not fail under Helm for a reason this renderer hid.
package main

import (
	"io/ioutil"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// obj is a decoded YAML or JSON map, as values and manifests are.
type obj = map[string]interface{}

func writeChart(t *testing.T, files map[string]string) string {
	t.Helper()
	dir, err := ioutil.TempDir("", "helmrender-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	base := map[string]string{
		"Chart.yaml":  "apiVersion: v2\nname: demo\nversion: 1.2.3\nappVersion: \"4.5\"\nkubeVersion: \">=1.27.0-0\"\n",
		"values.yaml": "",
	}
	for k, v := range files {
		base[k] = v
	}
	for name, text := range base {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := ioutil.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func render(t *testing.T, dir string, strict bool, overrides ...obj) (rendered, error) {
	t.Helper()
	c, err := loadChart(dir)
	if err != nil {
		t.Fatal(err)
	}
	values := c.Values
	for _, o := range overrides {
		values = coalesce(values, o)
	}
	caps, err := newCapabilities("v1.30.2", "monitoring.coreos.com/v1")
	if err != nil {
		t.Fatal(err)
	}
	return renderChart(c, renderOptions{Values: values, Release: releaseInfo("rel", "ns"),
		Capabilities: caps, Strict: strict})
}

func TestValuesDecodeLikeHelm(t *testing.T) {
	dir := writeChart(t, map[string]string{"values.yaml": "n: 1000000\nf: 0.5\ns: \"7\"\nm: {a: 1}\n"})
	c, err := loadChart(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Helm (sigs.k8s.io/yaml) gives every number as float64.
	if _, ok := c.Values["n"].(float64); !ok {
		t.Errorf("n is %T, Helm gives float64", c.Values["n"])
	}
	if _, ok := c.Values["m"].(obj); !ok {
		t.Errorf("m is %T, want obj", c.Values["m"])
	}
}

func TestCoalesce(t *testing.T) {
	base := obj{
		"keep": "x", "drop": "y", "list": []interface{}{1.0, 2.0},
		"nested": obj{"a": 1.0, "b": 2.0},
	}
	override := obj{
		"drop": nil, "list": []interface{}{3.0},
		"nested": obj{"b": 20.0, "c": 30.0},
	}
	got := coalesce(base, override)
	want := obj{
		"keep": "x", "list": []interface{}{3.0},
		"nested": obj{"a": 1.0, "b": 20.0, "c": 30.0},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("coalesce = %v, want %v", got, want)
	}
	if _, ok := base["nested"].(obj)["c"]; ok {
		t.Error("coalesce modified its input")
	}
}

func TestToYAML(t *testing.T) {
	got := toYAML(obj{
		"b": 8589934592.0, "a": []interface{}{"x", "1", true}, "c": obj{},
		"d": "multi\nline",
	})
	// Keys sorted, integers without exponent, strings that read as other types quoted.
	want := "a:\n  - x\n  - \"1\"\n  - true\nb: 8589934592\nc: {}\nd: |-\n  multi\n  line"
	if got != want {
		t.Errorf("toYAML =\n%s\nwant\n%s", got, want)
	}
	if toYAML(nil) != "null" {
		t.Errorf("toYAML(nil) = %q", toYAML(nil))
	}
}

func TestFromYAML(t *testing.T) {
	m := fromYAML("a:\n  b: 2\n")
	if m["a"].(obj)["b"] != 2.0 {
		t.Errorf("fromYaml = %v", m)
	}
	if _, ok := fromYAML("a: [")["Error"]; !ok {
		t.Error("fromYaml of bad YAML has no Error key")
	}
}

func TestRenderEngine(t *testing.T) {
	dir := writeChart(t, map[string]string{
		"values.yaml":        "name: world\ngreeting: \"hello {{ .Values.name }}\"\nport: 8080\n",
		"files/data.txt":     "from a file",
		"templates/_lib.tpl": `{{- define "demo.label" -}}app: {{ .Chart.Name }}-{{ .Chart.AppVersion }}{{- end -}}`,
		"templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n" +
			"  name: {{ .Release.Name }}\n" +
			"  labels:\n    {{- include \"demo.label\" . | nindent 4 }}\n" +
			"data:\n" +
			"  greeting: {{ tpl .Values.greeting . | quote }}\n" +
			"  file: {{ .Files.Get \"files/data.txt\" | quote }}\n" +
			"  port: {{ .Values.port | quote }}\n" +
			"  kube: {{ .Capabilities.KubeVersion.Minor | quote }}\n" +
			"  monitoring: {{ .Capabilities.APIVersions.Has \"monitoring.coreos.com/v1\" | quote }}\n" +
			"  self: {{ .Template.Name | quote }}\n" +
			"---\n# only a comment\n",
		"templates/NOTES.txt": "installed {{ .Release.Name }} in {{ .Release.Namespace }}",
	})
	out, err := render(t, dir, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Manifests) != 1 {
		t.Fatalf("%d manifests, want 1 (a comment-only document is dropped)", len(out.Manifests))
	}
	data := out.Manifests[0].Object.(obj)["data"].(obj)
	want := obj{
		"greeting": "hello world", "file": "from a file", "port": "8080", "kube": "30",
		"monitoring": "true", "self": "demo/templates/cm.yaml",
	}
	if !reflect.DeepEqual(data, want) {
		t.Errorf("data = %v, want %v", data, want)
	}
	if out.Notes != "installed rel in ns" {
		t.Errorf("notes = %q", out.Notes)
	}
}

func TestRequiredAndFail(t *testing.T) {
	dir := writeChart(t, map[string]string{
		"templates/x.yaml": "apiVersion: v1\nkind: Secret\nmetadata:\n" +
			"  name: {{ required \"secretName is required\" .Values.secretName }}\n" +
			"{{- if eq .Values.secretName \"bad\" }}{{ fail \"bad is not allowed\" }}{{ end }}\n",
	})
	_, err := render(t, dir, false)
	if err == nil || !strings.Contains(err.Error(), "secretName is required") {
		t.Errorf("required without a value: err = %v", err)
	}
	if _, err := render(t, dir, false, obj{"secretName": ""}); err == nil {
		t.Error("required accepted an empty string")
	}
	if _, err := render(t, dir, false, obj{"secretName": "s"}); err != nil {
		t.Errorf("required with a value: %v", err)
	}
	_, err = render(t, dir, false, obj{"secretName": "bad"})
	if err == nil || !strings.HasPrefix(err.Error(), "execution error at (demo/templates/x.yaml:") ||
		!strings.HasSuffix(err.Error(), ": bad is not allowed") {
		t.Errorf("fail: err = %v, want Helm's \"execution error at (...): message\"", err)
	}
}

func TestMissingKeys(t *testing.T) {
	dir := writeChart(t, map[string]string{
		"templates/x.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  v: \"{{ .Values.absent }}\"\n",
	})
	out, err := render(t, dir, false)
	if err != nil {
		t.Fatal(err)
	}
	// Helm prints a missing value as "" ...
	if v := out.Manifests[0].Object.(obj)["data"].(obj)["v"]; v != "" {
		t.Errorf("missing value rendered as %q, Helm renders \"\"", v)
	}
	// ... and `helm lint --strict` refuses it.
	if _, err := render(t, dir, true); err == nil {
		t.Error("strict rendering accepted a missing key")
	}
}

func TestKubeVersion(t *testing.T) {
	if err := checkKubeVersion(">=1.27.0-0", "v1.26.9"); err == nil {
		t.Error("1.26 accepted by >=1.27.0-0")
	}
	if err := checkKubeVersion(">=1.27.0-0", "v1.29.0-eks-1"); err != nil {
		t.Errorf("a 1.29 pre-release refused: %v", err)
	}
}

func TestSchema(t *testing.T) {
	schema := obj{
		"type": "object", "additionalProperties": false, "required": []interface{}{"size"},
		"definitions": obj{
			"size": obj{"type": "string", "pattern": "^[0-9]+Gi$"},
		},
		"properties": obj{
			"size":  obj{"$ref": "#/definitions/size"},
			"count": obj{"type": "integer", "minimum": 1.0},
			"mode":  obj{"enum": []interface{}{"a", "b"}},
			"tls": obj{
				"type": "object",
				"if":   obj{"properties": obj{"on": obj{"const": true}}},
				"then": obj{"required": []interface{}{"secret"}},
			},
			"either": obj{"anyOf": []interface{}{
				obj{"type": "string"}, obj{"type": "integer"}}},
		},
	}
	if err := checkSchemaKeywords(schema, "#"); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		values obj
		errors []string
	}{
		{obj{"size": "8Gi", "count": 2.0, "mode": "a", "either": 3.0}, nil},
		{obj{}, []string{"size: is required"}},
		{obj{"size": "8G"}, []string{`size: "8G" does not match pattern ^[0-9]+Gi$`}},
		{obj{"size": "1Gi", "count": 1.5}, []string{"count: expected integer, got number"}},
		{obj{"size": "1Gi", "count": 0.0}, []string{"count: must be >= 1 (got 0)"}},
		{obj{"size": "1Gi", "mode": "c"}, []string{`mode: must be one of "a", "b" (got "c")`}},
		{obj{"size": "1Gi", "extra": 1.0}, []string{"extra: is not an allowed property"}},
		{obj{"size": "1Gi", "tls": obj{"on": true}}, []string{"tls.secret: is required"}},
		{obj{"size": "1Gi", "tls": obj{"on": false}}, nil},
		{obj{"size": "1Gi", "either": true}, []string{"either: matches none of the allowed forms"}},
	}
	for _, c := range cases {
		got := validateSchema(schema, c.values)
		if len(got) != len(c.errors) {
			t.Errorf("%v: errors %q, want %q", c.values, got, c.errors)
			continue
		}
		for i := range got {
			if !strings.HasPrefix(got[i], c.errors[i]) {
				t.Errorf("%v: error %q, want prefix %q", c.values, got[i], c.errors[i])
			}
		}
	}
	// A keyword this checker does not implement must be refused, not ignored.
	unsupported := obj{"dependentRequired": obj{}}
	if err := checkSchemaKeywords(unsupported, "#"); err == nil {
		t.Error("an unsupported keyword was accepted")
	}
}
