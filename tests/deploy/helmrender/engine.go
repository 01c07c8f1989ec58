// The template engine: Helm's render loop and the functions Helm adds to sprig.
package main

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/semver"
	"github.com/Masterminds/sprig"
)

// KubeVersion is .Capabilities.KubeVersion.
type KubeVersion struct {
	Version    string // "v1.30.0"
	Major      string
	Minor      string
	GitVersion string
}

func (k KubeVersion) String() string { return k.Version }

// VersionSet is .Capabilities.APIVersions.
type VersionSet []string

// Has reports whether an API version ("apps/v1") or resource ("apps/v1/StatefulSet") is known.
func (v VersionSet) Has(apiVersion string) bool {
	for _, x := range v {
		if x == apiVersion {
			return true
		}
	}
	return false
}

type Capabilities struct {
	KubeVersion KubeVersion
	APIVersions VersionSet
	HelmVersion map[string]string
}

// The built-in API versions `helm template` assumes without a cluster.
var defaultAPIVersions = []string{
	"v1", "apps/v1", "batch/v1", "policy/v1", "networking.k8s.io/v1", "rbac.authorization.k8s.io/v1",
	"autoscaling/v2", "storage.k8s.io/v1", "apiextensions.k8s.io/v1",
}

func newCapabilities(kubeVersion, extraAPIVersions string) (Capabilities, error) {
	v, err := semver.NewVersion(kubeVersion)
	if err != nil {
		return Capabilities{}, fmt.Errorf("--kube-version %q: %v", kubeVersion, err)
	}
	versions := append(VersionSet{}, defaultAPIVersions...)
	for _, a := range strings.Split(extraAPIVersions, ",") {
		if a = strings.TrimSpace(a); a != "" {
			versions = append(versions, a)
		}
	}
	full := "v" + v.String()
	return Capabilities{
		KubeVersion: KubeVersion{Version: full, Major: fmt.Sprint(v.Major()),
			Minor: fmt.Sprint(v.Minor()), GitVersion: full},
		APIVersions: versions,
		HelmVersion: map[string]string{"Version": "v3.14.0"},
	}, nil
}

// releaseInfo is .Release for a first install.
func releaseInfo(name, namespace string) map[string]interface{} {
	return map[string]interface{}{
		"Name": name, "Namespace": namespace, "IsInstall": true, "IsUpgrade": false,
		"Revision": 1, "Service": "Helm",
	}
}

type renderOptions struct {
	Values       map[string]interface{}
	Release      map[string]interface{}
	Capabilities Capabilities
	Strict       bool
}

// Manifest is one rendered Kubernetes object and the template it came from.
type Manifest struct {
	Source string      `json:"source"`
	Text   string      `json:"-"`
	Object interface{} `json:"object"`
}

type rendered struct {
	Manifests []Manifest
	Notes     string
}

// YAML prints the manifests as `helm template` does.
func (r rendered) YAML() string {
	var b strings.Builder
	for _, m := range r.Manifests {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s", m.Source, m.Text)
	}
	return b.String()
}

// Helm stops include/tpl recursion at this depth rather than overflowing the stack.
const maxIncludeDepth = 1000

func renderChart(c *Chart, opts renderOptions) (rendered, error) {
	top := map[string]interface{}{
		"Values":       opts.Values,
		"Release":      opts.Release,
		"Chart":        c.Metadata,
		"Capabilities": opts.Capabilities,
		"Files":        c.Files,
		"Subcharts":    map[string]interface{}{},
	}
	basePath := c.Metadata.Name + "/templates"

	t := template.New("gotpl")
	if opts.Strict {
		t.Option("missingkey=error")
	} else {
		t.Option("missingkey=zero")
	}
	depth := 0
	funcs := funcMap()
	funcs["include"] = func(name string, data interface{}) (string, error) {
		if depth >= maxIncludeDepth {
			return "", fmt.Errorf("rendering template has a nested reference name: %s", name)
		}
		depth++
		defer func() { depth-- }()
		var buf strings.Builder
		if err := t.ExecuteTemplate(&buf, name, data); err != nil {
			return "", err
		}
		return buf.String(), nil
	}
	funcs["tpl"] = func(text string, data interface{}) (string, error) {
		if depth >= maxIncludeDepth {
			return "", errors.New("rendering template has a nested tpl reference")
		}
		depth++
		defer func() { depth-- }()
		clone, err := t.Clone()
		if err != nil {
			return "", err
		}
		tt, err := clone.New("tpl").Parse(text)
		if err != nil {
			return "", fmt.Errorf("cannot parse template %q: %v", text, err)
		}
		var buf strings.Builder
		if err := tt.Execute(&buf, data); err != nil {
			return "", fmt.Errorf("error calling tpl: %v", err)
		}
		return cleanOutput(buf.String(), opts.Strict), nil
	}
	t.Funcs(funcs)

	for _, f := range c.Templates {
		if _, err := t.New(f.Name).Parse(string(f.Data)); err != nil {
			return rendered{}, fmt.Errorf("parse error in %s: %v", f.Name, err)
		}
	}

	var out rendered
	notesName := basePath + "/NOTES.txt"
	for _, f := range c.Templates {
		base := f.Name[strings.LastIndex(f.Name, "/")+1:]
		if strings.HasPrefix(base, "_") {
			continue // partials only define templates
		}
		data := make(map[string]interface{}, len(top)+1)
		for k, v := range top {
			data[k] = v
		}
		data["Template"] = map[string]interface{}{"Name": f.Name, "BasePath": basePath}
		var buf strings.Builder
		if err := t.ExecuteTemplate(&buf, f.Name, data); err != nil {
			return rendered{}, cleanError(err)
		}
		text := cleanOutput(buf.String(), opts.Strict)
		if f.Name == notesName {
			out.Notes = text
			continue
		}
		for _, doc := range splitManifests(text) {
			objs, err := parseYAMLDocuments([]byte(doc))
			if err != nil {
				return rendered{}, fmt.Errorf("YAML parse error on %s: %v\n%s", f.Name, err,
					numbered(doc))
			}
			if len(objs) == 0 {
				continue // only comments
			}
			out.Manifests = append(out.Manifests, Manifest{Source: f.Name, Text: doc, Object: objs[0]})
		}
	}
	sort.SliceStable(out.Manifests, func(i, j int) bool {
		return out.Manifests[i].Source < out.Manifests[j].Source
	})
	return out, nil
}

// Helm prints missing values as "" rather than Go's "<no value>" unless it runs strict.
func cleanOutput(s string, strict bool) string {
	if strict {
		return s
	}
	return strings.ReplaceAll(s, "<no value>", "")
}

// A `fail` or `required` message reaches the user without the template engine's prefixes, with
// the location in the template being rendered, as Helm prints it:
// "execution error at (chart/templates/x.yaml:1:4): message".
var execErrorPrefix = regexp.MustCompile(
	`^(?s)template: ([^:]+:\d+:\d+): executing "[^"]*" at <.*?>: error calling \w+: `)

func cleanError(err error) error {
	msg := err.Error()
	location := ""
	for {
		m := execErrorPrefix.FindStringSubmatch(msg)
		if m == nil {
			break
		}
		if location == "" {
			location = m[1]
		}
		msg = msg[len(m[0]):]
	}
	if location == "" {
		return err
	}
	return fmt.Errorf("execution error at (%s): %s", location, msg)
}

func numbered(doc string) string {
	var b strings.Builder
	for i, line := range strings.Split(strings.TrimSuffix(doc, "\n"), "\n") {
		fmt.Fprintf(&b, "%4d | %s\n", i+1, line)
	}
	return b.String()
}

// funcMap is sprig's text functions with Helm's changes: no environment access, plus the YAML
// and JSON helpers, required and lookup. include and tpl are added by renderChart.
func funcMap() template.FuncMap {
	f := sprig.TxtFuncMap()
	delete(f, "env")
	delete(f, "expandenv")
	f["toYaml"] = toYAML
	f["fromYaml"] = fromYAML
	f["fromYamlArray"] = fromYAMLArray
	f["fromJson"] = fromJSON
	f["required"] = func(message string, v interface{}) (interface{}, error) {
		if v == nil {
			return v, errors.New(message)
		}
		if s, ok := v.(string); ok && s == "" {
			return v, errors.New(message)
		}
		return v, nil
	}
	// `helm template` has no cluster to look objects up in; Helm returns an empty map there too.
	f["lookup"] = func(apiVersion, kind, namespace, name string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil
	}
	return f
}
