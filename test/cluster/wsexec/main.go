// A WebSocket exec endpoint made of Kubernetes' own server code, for the tests
// of vram-preflight's WebSocket client (test/verify/exec-server.test.ts):
// k8s.io/streaming's wsstream, with which the API server speaks
// v5.channel.k8s.io to exec clients and the kubelet v4.channel.k8s.io, does
// the handshake, the framing and the channels; the Status on the error
// channel is written as the kubelet writes it (Success, or NonZeroExitCode
// with the exit code as its cause).
//
// It listens on 127.0.0.1 with the TLS certificate and key given, prints
// "listening PORT", and serves GET .../exec?command=WORD...&container=NAME as
// the API server's exec path: the command runs here, its stdout and stderr go
// to channels 1 and 2, its exit to channel 3, then the connection closes. The
// container named v4 is served v4.channel.k8s.io only, as a kubelet serves
// it; any other v5.channel.k8s.io only, as the API server does.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	constants "k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/streaming/pkg/httpstream/wsstream"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: wsexec CERT KEY")
		os.Exit(2)
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	fmt.Printf("listening %d\n", listener.Addr().(*net.TCPAddr).Port)
	http.HandleFunc("/", serveExec)
	panic(http.ServeTLS(listener, nil, os.Args[1], os.Args[2]))
}

func serveExec(w http.ResponseWriter, req *http.Request) {
	// The channels the API server opens for stdout and stderr without stdin or a tty (k8s.io/apiserver/pkg/util/proxy/websocket.go).
	channels := []wsstream.ChannelType{wsstream.IgnoreChannel, wsstream.WriteChannel, wsstream.WriteChannel, wsstream.WriteChannel, wsstream.ReadChannel}
	name := constants.StreamProtocolV5Name
	if req.URL.Query().Get("container") == "v4" {
		name = constants.StreamProtocolV4Name
	}
	conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{name: {Binary: true, Channels: channels}})
	_, streams, err := conn.Open(w, req)
	if err != nil {
		return
	}
	defer conn.Close()
	// As the API server: an empty message on the lowest writable channel says the connection is up.
	if _, err := streams[constants.StreamStdOut].Write([]byte{}); err != nil {
		return
	}
	command := req.URL.Query()["command"]
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdout = streams[constants.StreamStdOut]
	cmd.Stderr = streams[constants.StreamStdErr]
	status := metav1.Status{Status: metav1.StatusSuccess}
	var exit *exec.ExitError
	if err := cmd.Run(); errors.As(err, &exit) {
		status = metav1.Status{
			Status:  metav1.StatusFailure,
			Reason:  constants.NonZeroExitCodeReason,
			Message: fmt.Sprintf("command terminated with non-zero exit code: %v", err),
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: constants.ExitCodeCauseType, Message: fmt.Sprintf("%d", exit.ExitCode())}}},
		}
	} else if err != nil {
		status = metav1.Status{Status: metav1.StatusFailure, Reason: metav1.StatusReasonInternalError, Message: err.Error()}
	}
	body, _ := json.Marshal(status)
	_, _ = streams[constants.StreamErr].Write(body)
}
