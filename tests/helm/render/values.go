package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/xeipuuv/gojsonschema"
	"sigs.k8s.io/yaml"
)

// chart is what helm reads from a chart directory (no dependencies, no packaged charts).
type chart struct {
	dir      string
	metadata metadata
	defaults map[string]interface{}
	schema   []byte // values.schema.json; nil when the chart has none
}

// metadata is Chart.yaml, with the field names templates use (.Chart.Name, .Chart.AppVersion).
type metadata struct {
	APIVersion  string   `json:"apiVersion"`
	Name        string   `json:"name"`
	Version     string   `json:"version"`
	AppVersion  string   `json:"appVersion"`
	Description string   `json:"description"`
	Type        string   `json:"type"`
	Keywords    []string `json:"keywords"`
}

func loadChart(dir string) (*chart, error) {
	c := &chart{dir: dir}
	if err := readYAML(filepath.Join(dir, "Chart.yaml"), &c.metadata); err != nil {
		return nil, err
	}
	if c.metadata.Name == "" {
		return nil, fmt.Errorf("%s/Chart.yaml: no name", dir)
	}
	if err := readYAML(filepath.Join(dir, "values.yaml"), &c.defaults); err != nil {
		return nil, err
	}
	schema, err := os.ReadFile(filepath.Join(dir, "values.schema.json"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	c.schema = schema
	return c, nil
}

// readYAML parses as helm does (sigs.k8s.io/yaml: YAML to JSON, so numbers are float64).
func readYAML(path string, out interface{}) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	return nil
}

// values merges the -f files in order over the chart's defaults and validates the result
// against values.schema.json, as helm does before it renders anything.
func (c *chart) values(files []string) (map[string]interface{}, error) {
	user := map[string]interface{}{}
	for _, f := range files {
		var v map[string]interface{}
		if err := readYAML(f, &v); err != nil {
			return nil, err
		}
		user = mergeMaps(user, v)
	}
	values := coalesce(user, c.defaults)
	if err := c.validate(values); err != nil {
		return nil, err
	}
	return values, nil
}

// mergeMaps overlays b on a (helm's -f merge): nested maps merge, anything else is replaced.
func mergeMaps(a, b map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if bm, ok := v.(map[string]interface{}); ok {
			if am, ok := out[k].(map[string]interface{}); ok {
				out[k] = mergeMaps(am, bm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// coalesce fills what user values leave out from the chart's defaults; a user null deletes the
// default (helm's CoalesceValues).
func coalesce(user, defaults map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(defaults))
	for k, v := range defaults {
		out[k] = v
	}
	for k, v := range user {
		if v == nil {
			delete(out, k)
			continue
		}
		if um, ok := v.(map[string]interface{}); ok {
			if dm, ok := out[k].(map[string]interface{}); ok {
				out[k] = coalesce(um, dm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// validate checks values against values.schema.json with the library (gojsonschema) and the
// message format of helm 3 up to 3.17; newer releases validate with another library and may word
// the same failures differently.
func (c *chart) validate(values map[string]interface{}) error {
	if c.schema == nil {
		return nil
	}
	valuesYAML, err := yaml.Marshal(values)
	if err != nil {
		return err
	}
	valuesJSON, err := yaml.YAMLToJSON(valuesYAML)
	if err != nil {
		return err
	}
	result, err := gojsonschema.Validate(gojsonschema.NewBytesLoader(c.schema),
		gojsonschema.NewBytesLoader(valuesJSON))
	if err != nil {
		return fmt.Errorf("%s/values.schema.json: %v", c.dir, err)
	}
	if result.Valid() {
		return nil
	}
	var sb strings.Builder
	sb.WriteString("values don't meet the specifications of the schema(s) in the following chart(s):\n")
	sb.WriteString(c.metadata.Name + ":\n")
	for _, e := range result.Errors() {
		sb.WriteString(fmt.Sprintf("- %s\n", e))
	}
	return errors.New(sb.String())
}
