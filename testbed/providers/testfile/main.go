// Command pulumi-resource-testfile is the test bed's file provider: one resource,
// testfile:index:File, a file on the machine the provider runs on.
//
// Inputs (strings): path (required), content, delay (seconds each create or update
// waits first), cancellable ("true": the engine's Cancel, sent when the CLI is
// interrupted, ends a waiting create or update at once, failing it as canceled; otherwise
// the delay runs to its end, as a provider that ignores Cancel does), fail (if set, each
// create or update fails with this message).
// Outputs: the inputs. A new path replaces the file (deleted first); a new content or
// fail updates it. It is what the test bed's YAML files program declares, so that a
// test's run costs a Go plugin's start rather than two Python interpreters'.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"
)

const version = "0.1.0"

var inputs = []string{"path", "content", "delay", "cancellable", "fail"}

// cancelled is closed by the engine's Cancel: the update is being stopped.
var (
	cancelled  = make(chan struct{})
	cancelOnce sync.Once
)

func schema() string {
	props := ""
	for i, name := range inputs {
		if i > 0 {
			props += ","
		}
		props += fmt.Sprintf("%q:{\"type\":\"string\"}", name)
	}
	return fmt.Sprintf(`{"name":"testfile","version":%q,"resources":{"testfile:index:File":{`+
		`"inputProperties":{%s},"requiredInputs":["path"],"properties":{%s},"required":["path"]}}}`,
		version, props, props)
}

type server struct {
	pulumirpc.UnimplementedResourceProviderServer
}

// str is an input as a string: YAML hands a config value that reads as a number or a
// boolean over as one, whatever the config's declared type.
func str(s *structpb.Struct, key string) string {
	if s == nil {
		return ""
	}
	switch value := s.GetFields()[key].GetKind().(type) {
	case *structpb.Value_StringValue:
		return value.StringValue
	case *structpb.Value_NumberValue:
		return strconv.FormatFloat(value.NumberValue, 'f', -1, 64)
	case *structpb.Value_BoolValue:
		return strconv.FormatBool(value.BoolValue)
	}
	return ""
}

// asStrings is props with every input as a string (absent ones as ""), as stored.
func asStrings(props *structpb.Struct) *structpb.Struct {
	fields := map[string]*structpb.Value{}
	for _, key := range inputs {
		fields[key] = structpb.NewStringValue(str(props, key))
	}
	return &structpb.Struct{Fields: fields}
}

func (server) GetPluginInfo(context.Context, *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: version}, nil
}

func (server) GetSchema(context.Context, *pulumirpc.GetSchemaRequest) (*pulumirpc.GetSchemaResponse, error) {
	return &pulumirpc.GetSchemaResponse{Schema: schema()}, nil
}

func (server) CheckConfig(_ context.Context, r *pulumirpc.CheckRequest) (*pulumirpc.CheckResponse, error) {
	return &pulumirpc.CheckResponse{Inputs: r.GetNews()}, nil
}

func (server) DiffConfig(context.Context, *pulumirpc.DiffRequest) (*pulumirpc.DiffResponse, error) {
	return &pulumirpc.DiffResponse{Changes: pulumirpc.DiffResponse_DIFF_NONE}, nil
}

func (server) Configure(context.Context, *pulumirpc.ConfigureRequest) (*pulumirpc.ConfigureResponse, error) {
	return &pulumirpc.ConfigureResponse{SupportsPreview: true}, nil
}

func (server) Check(_ context.Context, r *pulumirpc.CheckRequest) (*pulumirpc.CheckResponse, error) {
	if str(r.GetNews(), "path") == "" {
		failure := &pulumirpc.CheckFailure{Property: "path", Reason: "path is required"}
		return &pulumirpc.CheckResponse{Failures: []*pulumirpc.CheckFailure{failure}}, nil
	}
	return &pulumirpc.CheckResponse{Inputs: asStrings(r.GetNews())}, nil
}

func (server) Diff(_ context.Context, r *pulumirpc.DiffRequest) (*pulumirpc.DiffResponse, error) {
	olds := r.GetOldInputs()
	if olds == nil {
		olds = r.GetOlds()
	}
	var diffs, replaces []string
	for _, key := range []string{"path", "content", "fail"} {
		if str(olds, key) != str(r.GetNews(), key) {
			diffs = append(diffs, key)
		}
	}
	if str(olds, "path") != str(r.GetNews(), "path") {
		replaces = []string{"path"}
	}
	changes := pulumirpc.DiffResponse_DIFF_NONE
	if len(diffs) > 0 {
		changes = pulumirpc.DiffResponse_DIFF_SOME
	}
	return &pulumirpc.DiffResponse{
		Changes:             changes,
		Diffs:               diffs,
		Replaces:            replaces,
		DeleteBeforeReplace: len(replaces) > 0,
	}, nil
}

// write waits the delay (cut short by a Cancel when cancellable), fails as told, or
// writes the content.
func write(props *structpb.Struct) error {
	if delay := str(props, "delay"); delay != "" {
		seconds, err := strconv.ParseFloat(delay, 64)
		if err != nil {
			return fmt.Errorf("delay %q is not a number of seconds", delay)
		}
		if !wait(time.Duration(seconds*float64(time.Second)), str(props, "cancellable") == "true") {
			return errors.New("canceled: the engine asked the provider to stop")
		}
	}
	if message := str(props, "fail"); message != "" {
		return errors.New(message)
	}
	path := str(props, "path")
	if err := os.WriteFile(path, []byte(str(props, "content")), 0o644); err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) {
			return failure(errno, path)
		}
		return err
	}
	return nil
}

// wait sleeps for d; false if a Cancel came first and the wait is cancellable.
func wait(d time.Duration, cancellable bool) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	if !cancellable {
		<-timer.C
		return true
	}
	select {
	case <-timer.C:
		return true
	case <-cancelled:
		return false
	}
}

func (server) Create(_ context.Context, r *pulumirpc.CreateRequest) (*pulumirpc.CreateResponse, error) {
	if !r.GetPreview() {
		if err := write(r.GetProperties()); err != nil {
			return nil, err
		}
	}
	return &pulumirpc.CreateResponse{Id: str(r.GetProperties(), "path"), Properties: r.GetProperties()}, nil
}

func (server) Update(_ context.Context, r *pulumirpc.UpdateRequest) (*pulumirpc.UpdateResponse, error) {
	if !r.GetPreview() {
		if err := write(r.GetNews()); err != nil {
			return nil, err
		}
	}
	return &pulumirpc.UpdateResponse{Properties: r.GetNews()}, nil
}

// Delete unlinks the file; a missing one is gone already, and anything else that is
// not a file (a directory made in its place) fails the delete, as a file's delete should.
func (server) Delete(_ context.Context, r *pulumirpc.DeleteRequest) (*emptypb.Empty, error) {
	path := str(r.GetProperties(), "path")
	err := syscall.Unlink(path)
	if err != nil && !errors.Is(err, syscall.ENOENT) {
		return nil, failure(err, path)
	}
	return &emptypb.Empty{}, nil
}

// failure is err about path, worded as the C library words it ("Is a directory: 'p'").
func failure(err error, path string) error {
	text := err.Error()
	if text != "" {
		text = strings.ToUpper(text[:1]) + text[1:]
	}
	return fmt.Errorf("%s: '%s'", text, path)
}

func (server) Read(_ context.Context, r *pulumirpc.ReadRequest) (*pulumirpc.ReadResponse, error) {
	return &pulumirpc.ReadResponse{Id: r.GetId(), Properties: r.GetProperties(), Inputs: r.GetInputs()}, nil
}

func (server) Cancel(context.Context, *emptypb.Empty) (*emptypb.Empty, error) {
	cancelOnce.Do(func() { close(cancelled) })
	return &emptypb.Empty{}, nil
}

// main serves on a loopback port and prints it, as the engine expects of a plugin.
func main() {
	if len(os.Args) > 1 && os.Args[1] == "--version" {
		fmt.Println(version)
		return
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	grpcServer := grpc.NewServer()
	pulumirpc.RegisterResourceProviderServer(grpcServer, server{})
	fmt.Println(listener.Addr().(*net.TCPAddr).Port)
	if err := grpcServer.Serve(listener); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
