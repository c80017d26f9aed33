package main

import (
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	"sigs.k8s.io/yaml"
)

// What the release is rendered against: its namespace, install or upgrade, and the objects the
// cluster holds (for lookup).
type releaseState struct {
	namespace string
	upgrade   bool
	cluster   []map[string]interface{}
}

// loadObjects reads a multi-document YAML file of Kubernetes objects; none for "".
func loadObjects(file string) ([]map[string]interface{}, error) {
	if file == "" {
		return nil, nil
	}
	text, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var objects []map[string]interface{}
	for _, doc := range documentSeparator.Split(string(text), -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var object map[string]interface{}
		if err := yaml.Unmarshal([]byte(doc), &object); err != nil {
			return nil, err
		}
		objects = append(objects, object)
	}
	return objects, nil
}

// lookup is helm's: the object of that apiVersion, kind, namespace and name, or with an empty
// name {"items": [...]} of every such object; an empty map when there is none.
func (r releaseState) lookup(apiVersion, kind, namespace, name string) map[string]interface{} {
	var items []interface{}
	for _, o := range r.cluster {
		meta, _ := o["metadata"].(map[string]interface{})
		if o["apiVersion"] != apiVersion || o["kind"] != kind || meta == nil ||
			(namespace != "" && meta["namespace"] != namespace) {
			continue
		}
		if name == "" {
			items = append(items, o)
		} else if meta["name"] == name {
			return o
		}
	}
	if name == "" && len(items) > 0 {
		return map[string]interface{}{"items": items}
	}
	return map[string]interface{}{}
}

type manifest struct {
	source  string // <chart>/templates/<file>, as helm's "# Source:" line names it
	content string
}

type rendered struct {
	manifests []manifest
	notes     string
}

// A line that holds only a YAML document separator.
var documentSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// render parses every file of templates/ into one template set (so that each can include the
// partials of the others), then executes each file whose name does not start with "_".
func (c *chart) render(values map[string]interface{}, release string, state releaseState) (*rendered, error) {
	files, err := filepath.Glob(filepath.Join(c.dir, "templates", "*"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	set := template.New(c.metadata.Name).Option("missingkey=zero")
	set.Funcs(funcMap(set, state))
	var names []string
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		name := path.Join(c.metadata.Name, "templates", filepath.Base(f))
		if _, err := set.New(name).Parse(string(text)); err != nil {
			return nil, err
		}
		if !strings.HasPrefix(filepath.Base(f), "_") {
			names = append(names, name)
		}
	}
	out := &rendered{}
	revision := 1
	if state.upgrade {
		revision = 2
	}
	for _, name := range names {
		context := map[string]interface{}{
			"Values": values,
			"Chart":  c.metadata,
			"Release": map[string]interface{}{
				"Name": release, "Namespace": state.namespace, "Service": "Helm",
				"IsInstall": !state.upgrade, "IsUpgrade": state.upgrade, "Revision": revision,
			},
			"Template": map[string]interface{}{
				"Name": name, "BasePath": path.Join(c.metadata.Name, "templates"),
			},
			"Files": chartFiles{dir: c.dir},
		}
		var buf bytes.Buffer
		if err := set.ExecuteTemplate(&buf, name, context); err != nil {
			return nil, err
		}
		// missingkey=zero prints a missing map key as "<no value>"; helm blanks it.
		text := strings.ReplaceAll(buf.String(), "<no value>", "")
		if path.Base(name) == "NOTES.txt" {
			out.notes = text
			continue
		}
		for _, doc := range documentSeparator.Split(text, -1) {
			if doc = strings.TrimSpace(doc); doc != "" && !onlyComments(doc) {
				out.manifests = append(out.manifests, manifest{source: name, content: doc})
			}
		}
	}
	return out, nil
}

// chartFiles is helm's .Files: the chart's files by their path in the chart. Get of a file that
// is not there is empty, as in helm.
type chartFiles struct{ dir string }

func (f chartFiles) Get(name string) string {
	data, err := os.ReadFile(filepath.Join(f.dir, filepath.FromSlash(name)))
	if err != nil {
		return ""
	}
	return string(data)
}

func onlyComments(doc string) bool {
	for _, line := range strings.Split(doc, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			return false
		}
	}
	return true
}

// funcMap is sprig's text functions less env and expandenv (helm drops them), plus the Helm
// functions the chart uses: include, toYaml and lookup.
func funcMap(set *template.Template, state releaseState) template.FuncMap {
	funcs := sprig.TxtFuncMap()
	delete(funcs, "env")
	delete(funcs, "expandenv")
	depth := map[string]int{}
	funcs["include"] = func(name string, data interface{}) (string, error) {
		// helm's guard against a template that includes itself without end
		if depth[name] > 1000 {
			return "", fmt.Errorf("rendering template has a nested reference name: %s", name)
		}
		depth[name]++
		defer func() { depth[name]-- }()
		var buf bytes.Buffer
		err := set.ExecuteTemplate(&buf, name, data)
		return buf.String(), err
	}
	funcs["lookup"] = state.lookup
	funcs["toYaml"] = func(v interface{}) string {
		data, err := yaml.Marshal(v)
		if err != nil {
			return "" // helm swallows the error too
		}
		return strings.TrimSuffix(string(data), "\n")
	}
	return funcs
}
